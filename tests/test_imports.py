"""The package's layout: no import circles in acl_jax/, and modules small enough to read.

The import graph is built from the source (ast), counting every import in a module, those
inside functions too: a lazy import that dodges a circle at load time still ties the two
modules into one, which neither can be read, tested or moved without.
"""
import ast
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "acl_jax"

# The most lines a module may hold: the study library and the scripts over it, and the rest
# of the package (models, losses, data and training, whose kernels run longer).
LIMITS = ((os.path.join(PACKAGE, "study"), 400), ("scripts", 400), (PACKAGE, 550))


def _modules() -> dict[str, str]:
  """Every module of the package: dotted name -> file."""
  found = {}
  for folder, _, files in os.walk(os.path.join(REPO, PACKAGE)):
    for f in files:
      if f.endswith(".py"):
        rel = os.path.relpath(os.path.join(folder, f), REPO)[:-3].split(os.sep)
        if rel[-1] == "__init__":
          rel = rel[:-1]
        found[".".join(rel)] = os.path.join(folder, f)
  return found


def _imported(node: ast.AST, here: str, is_package: bool, modules: dict) -> set[str]:
  """The package's modules an import node names: `import a.b`, `from a import b` (b a
  submodule, or a name in a), relative imports resolved against the module `here`."""
  if isinstance(node, ast.Import):
    names = [a.name for a in node.names]
  else:
    base = node.module or ""
    if node.level:
      parts = here.split(".")
      parts = parts if is_package else parts[:-1]
      parts = parts[:len(parts) - (node.level - 1)]
      base = ".".join(parts + ([base] if base else []))
    names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
             for a in node.names]
  out = set()
  for name in names:
    while name and name not in modules:  # `import acl_jax.x.y` names acl_jax.x.y itself
      name = name.rpartition(".")[0]
    if name:
      out.add(name)
  return out


def import_graph() -> dict[str, set[str]]:
  """Module -> the package's modules it imports, anywhere in its source."""
  modules = _modules()
  graph = {}
  for name, path in modules.items():
    with open(path) as f:
      tree = ast.parse(f.read(), path)
    is_package = path.endswith("__init__.py")
    deps = set()
    for node in ast.walk(tree):
      if isinstance(node, (ast.Import, ast.ImportFrom)):
        deps |= _imported(node, name, is_package, modules)
    # A package imports its parents' __init__ as it loads, which is no circle of its own.
    graph[name] = {d for d in deps if d != name and not name.startswith(d + ".")}
  return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
  """One import circle as [a, b, ..., a], or None (depth-first search, three colours)."""
  state, stack = {}, []

  def visit(node):
    state[node] = "open"
    stack.append(node)
    for dep in sorted(graph.get(node, ())):
      if state.get(dep) == "open":
        return stack[stack.index(dep):] + [dep]
      if dep not in state and (cycle := visit(dep)):
        return cycle
    stack.pop()
    state[node] = "done"
    return None

  for node in sorted(graph):
    if node not in state and (cycle := visit(node)):
      return cycle
  return None


def test_graph_sees_lazy_and_submodule_imports():
  graph = import_graph()
  assert "acl_jax.study.records" in graph["acl_jax.study.aggregate"]  # from acl_jax.study import
  assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
  assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles():
  cycle = find_cycle(import_graph())
  assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_module_line_limits():
  over = []
  for top in ("scripts", PACKAGE):
    for folder, _, files in os.walk(os.path.join(REPO, top)):
      for f in files:
        if not f.endswith(".py"):
          continue
        rel = os.path.relpath(os.path.join(folder, f), REPO)
        limit = next(n for prefix, n in LIMITS if rel.startswith(prefix + os.sep))
        with open(os.path.join(REPO, rel)) as fh:
          lines = sum(1 for _ in fh)
        if lines > limit:
          over.append(f"{rel}: {lines} lines (at most {limit})")
  assert not over, "; ".join(over)


if __name__ == "__main__":
  pytest.main([__file__])
