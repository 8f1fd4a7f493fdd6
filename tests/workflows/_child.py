"""A workflow runner in its own process: ``_child.py DATA_DIR run RUN_ID JSON [WORKFLOW]`` or ``_child.py DATA_DIR resume-all``.

Prints one JSON line with the outcome(s). Used by test_crash.py, which SIGKILLs it. With
``$WF_TEST_DATABASE`` set (a PostgreSQL URL), the runs live there (space: DATA_DIR) instead
(tests/store/test_pg_workflows.py).
"""

import json
import os
import sys

import anyio

from openfunctions.workflows import RunOutcome, WorkflowRuns
from tests.workflows._app import checkout, workflows


async def main() -> None:
    data, op = sys.argv[1], sys.argv[2]
    url = os.environ.get("WF_TEST_DATABASE")
    runs = WorkflowRuns(database=url, space=data, workflows=workflows) if url else WorkflowRuns(data, workflows=workflows)
    if op == "run":
        wf = {w.name: w for w in workflows}[sys.argv[5]] if len(sys.argv) > 5 else checkout
        out = await runs.run(wf, json.loads(sys.argv[4]), run_id=sys.argv[3])
        print(json.dumps(out.to_dict()), flush=True)
    else:
        results = await runs.resume_interrupted()
        print(json.dumps([r.to_dict() if isinstance(r, RunOutcome) else {"error": r.to_dict()} for r in results]), flush=True)


anyio.run(main)
