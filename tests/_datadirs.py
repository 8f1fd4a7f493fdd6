"""Copy a committed data-dir fixture into a test's temp dir with the modes the product insists on.

Git keeps no file modes beyond the executable bit, so a fixture checked out on a fresh
clone is 0644/0755; journals and stores refuse group- or world-readable paths. Every
fixture copy goes through here so the fixture opens as the product wrote it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def copy_data_dir(src: Path, dest: Path) -> Path:
    """Copy ``src`` to ``dest`` (which must not exist), directories 0700 and files 0600; return ``dest``."""
    shutil.copytree(src, dest)
    for root, _dirs, files in os.walk(dest):
        os.chmod(root, 0o700)
        for name in files:
            os.chmod(os.path.join(root, name), 0o600)
    return dest
