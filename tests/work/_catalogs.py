"""Catalog snippets the crash tests share (files and PostgreSQL, one controller or replicas)."""

from __future__ import annotations

import sys

#: a command that appends ``ran <pid> <seconds>`` to counter.txt (fsynced), then sleeps ``seconds``
SLEEPER = (
    "import os,sys,time\n"
    "with open('counter.txt','a') as f:\n"
    "    f.write('ran %d %s\\n' % (os.getpid(), sys.argv[1])); f.flush(); os.fsync(f.fileno())\n"
    "time.sleep(float(sys.argv[1]))\n"
)

#: step ``count``: runs SLEEPER (an effect with no readback: uncertain after a crash)
COUNT_STEP = (
    "\n[steps.count]\n"
    'kind = "command"\n'
    'description = "append a line to counter.txt, then sleep"\n'
    f"argv = ['{sys.executable}', '-c', '''{SLEEPER}''', '{{seconds}}']\n"
    'effect = "write"\n'
    "timeout_s = 300\n"
    'env = ["PATH"]\n'
    "[steps.count.params.seconds]\n"
    'type = "integer"\n'
    "minimum = 0\n"
    "maximum = 600\n"
)

#: steps ``write_src`` (write_file under src/) and ``check`` (a verifier: src/a.txt says hello)
WRITE_CATALOG = f"""
[steps.write_src]
kind = "write_file"
description = "write a file under src/"
paths = ["src/**"]

[steps.check]
kind = "command"
description = "the test suite: src/a.txt must say hello"
argv = ['{sys.executable}', "-c", "import pathlib,sys; sys.exit(0 if pathlib.Path('src/a.txt').read_text() == 'hello' else 1)"]
effect = "read"
verifier = true
env = ["PATH"]
"""
