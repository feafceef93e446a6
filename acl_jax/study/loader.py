"""A study's protocol from where it is written: a module or a file that defines a `Protocol`
(`load("studies.papers:PAPERS")`, `load("studies/mine.py")`), checked before it is used.

Loading is where a protocol is refused: `checks.check` (what the planner could not take to the
end) and `resolve.check` (its runs resolved as train.py will resolve them) both run here, so
a protocol that loads is one whose every run can train and be recorded. Importing a study's
file imports its configs' light modules; nothing here imports jax itself.
"""
import importlib
import importlib.util
import os

from acl_jax.study import checks, protocol as proto, resolve

DEFAULT = "studies.papers:PAPERS"
# The checkout the sweep runs train.py in: the config files' paths are relative to it.
CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load(spec: str = DEFAULT, checkout: str = CHECKOUT) -> proto.Protocol:
  """The Protocol a spec names: "package.module:NAME", a module ("studies.example_csv"), or a file
  ("studies/mine.py", optionally with ":NAME"). Without NAME, the module's one Protocol.

  It is checked (`checks.check`: a ValueError naming what the planner could not do), and its
  runs are resolved as train.py will resolve them in `checkout` (`resolve.check`): a method
  no preset has, or a field no config has, is refused (a UserError naming it) before any run
  trains."""
  got = _find(spec)
  checks.check(got)
  resolve.check(got, checkout)
  return got


def _find(spec: str) -> proto.Protocol:
  where, _, name = spec.partition(":")
  if where.endswith(".py"):
    if not os.path.isfile(where):
      raise FileNotFoundError(f"--protocol {spec}: no file {where}; give a protocol file's "
                              "path or a module such as studies.papers.")
    mod_spec = importlib.util.spec_from_file_location(
        "study_" + os.path.basename(where)[:-3], where)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
  else:
    try:
      module = importlib.import_module(where)
    except ModuleNotFoundError as e:
      raise FileNotFoundError(f"--protocol {spec}: cannot import {where} ({e}); give a module "
                              "on the path (studies.papers) or a .py file.") from e
  if name:
    got = getattr(module, name, None)
    if not isinstance(got, proto.Protocol):
      raise ValueError(f"--protocol {spec}: {where} has no Protocol named {name}.")
    return got
  found = list({id(v): v for v in vars(module).values()
                if isinstance(v, proto.Protocol)}.values())
  if len(found) != 1:
    raise ValueError(f"--protocol {spec}: {where} defines {len(found)} Protocol values; name "
                     "one as module:NAME.")
  return found[0]
