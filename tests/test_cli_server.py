"""tests/cli_server.py gives what a fresh process gives: the same exit code, stdout and stderr."""
import re
import subprocess
import sys

from tests import helpers


def _untimed(text: str) -> str:
  return re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+", "<time>", text)


def test_a_forked_tool_run_is_a_fresh_process_run(tmp_path):
  argv = ["train.py", "--config", "configs/quickstart.py", "--config.batch_size=0",
          "--workdir", str(tmp_path / "run")]
  e = helpers.env()
  fresh = subprocess.run([sys.executable, *argv], cwd=helpers.REPO, env=e, text=True,
                         capture_output=True, timeout=300)
  forked = helpers.run_py(argv)
  server = helpers._cli["server"]  # pylint: disable=protected-access
  assert helpers._cli_server(e)["server"] is server  # pylint: disable=protected-access
  assert fresh.returncode == 2 and "batch_size must be >= 1" in fresh.stderr
  assert (forked.returncode, _untimed(forked.stdout), _untimed(forked.stderr)) == (
      fresh.returncode, _untimed(fresh.stdout), _untimed(fresh.stderr))
  # Another environment than the warm parent's: a parent of its own, started in it.
  other = helpers.run_py(argv, ACL_JAX_SOME_SETTING="1")
  assert helpers._cli["server"] is not server  # pylint: disable=protected-access
  assert helpers._cli["env"]["ACL_JAX_SOME_SETTING"] == "1"  # pylint: disable=protected-access
  assert (other.returncode, _untimed(other.stderr)) == (fresh.returncode, _untimed(fresh.stderr))
