"""acl_jax installs as a package whose pinned dependencies are requirements.txt's (and
acl-jax[ray] adds the Ray the tests pin)."""
import os
import re
import subprocess
import sys

from tests import helpers


def _pins(path):
  with open(path) as f:
    return sorted(line.split("#")[0].strip() for line in f if line.split("#")[0].strip())


def test_pip_install_gives_an_importable_package_with_the_pinned_deps(tmp_path):
  target = tmp_path / "site"
  p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                      "--no-build-isolation", "--target", str(target), helpers.REPO],
                     capture_output=True, text=True, timeout=300,
                     cwd=str(tmp_path))  # the build leaves no files in the clone
  assert p.returncode == 0, p.stderr[-2000:]
  # Imported from another folder, with the clone off the path.
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  env["PYTHONPATH"] = str(target)
  q = subprocess.run([sys.executable, "-c", "import acl_jax, acl_jax.losses; "
                      "print(acl_jax.__file__)"], cwd=str(tmp_path), env=env,
                     capture_output=True, text=True, timeout=300)
  assert q.returncode == 0, q.stderr[-2000:]
  assert q.stdout.strip().startswith(str(target))
  meta = next(target.glob("acl_jax-*.dist-info")) / "METADATA"
  reqs = [re.sub(r"\s+", "", m) for m in
          re.findall(r"^Requires-Dist: (.+)$", meta.read_text(), re.M)]
  deps = sorted(r for r in reqs if "extra==" not in r)
  assert deps == [re.sub(r"\s+", "", d) for d in
                  _pins(os.path.join(helpers.REPO, "requirements.txt"))]
  # acl-jax[ray]: RayExecutor's Ray, at the version the tests pin.
  ray_pin = [p for p in _pins(os.path.join(helpers.REPO, "requirements-test.txt"))
             if p.startswith("ray==")]
  assert sorted(r for r in reqs if "extra==" in r) == [f'{ray_pin[0]};extra=="ray"']
