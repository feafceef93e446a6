"""G-Loss: label propagation on a per-batch similarity graph (SPEC §2.6)."""
import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from acl_jax.losses.contrastive import safe_normalize
from acl_jax.names import check_known
from acl_jax.threefry import threefry2x32

GLOSS_FORMS = ("clean", "official")
# Weight floor on off-diagonal edges, relative to the strongest edge (see `propagate`).
DEFAULT_W_FLOOR = 1e-6


def check_sigma(sigma) -> None:
  """Raises ValueError unless the kernel width is positive (skipped for traced values)."""
  if not isinstance(sigma, jax.core.Tracer) and not float(sigma) > 0:
    raise ValueError(
        f"sigma (the Gaussian kernel width) must be > 0, got {sigma!r}. SPEC §2.6 sets "
        "loss.sigma's default; sigma_sqrt_heuristic() estimates one from pretrained embeddings.")


def _round_kept(gamma_keep: float, n: int) -> int:
  """round(gamma_keep * n), halves up, on the decimal the config wrote: 0.7 * 45 is 31.5 and
  gives 32, though the binary 0.7 makes the float product 31.4999... (hence the 1e-9)."""
  return int(math.floor(float(gamma_keep) * n + 0.5 + 1e-9))


def check_gamma_keep(gamma_keep: float, batch_size: Optional[int] = None) -> int:
  """Validates gamma_keep and returns n_L, the number of labelled nodes.

  n_L = round(gamma_keep * batch_size), rounding halves up (`_round_kept`). (The official
  code keeps the items whose random rank is < gamma * N, which is ceil(gamma * N); the two
  differ only when gamma * N is not within 0.5 of an integer.)

  Args:
    gamma_keep: kept (labelled) fraction, in (0, 1).
    batch_size: N; when given, n_L must leave at least one labelled and one hidden node.

  Returns:
    n_L, or -1 when batch_size is None.
  """
  if not 0.0 < float(gamma_keep) < 1.0:
    raise ValueError(
        f"gamma_keep (the fraction of batch labels kept for propagation) must lie in (0, 1), "
        f"got {gamma_keep!r}. The paper's stable range is 0.5-0.7; gamma_hide = 1 - "
        "gamma_keep.")
  if batch_size is None:
    return -1
  num_labelled = _round_kept(gamma_keep, batch_size)
  if not 0 < num_labelled < batch_size:
    raise ValueError(
        f"gamma_keep={gamma_keep} with batch size {batch_size} keeps {num_labelled} labelled "
        f"and {batch_size - num_labelled} hidden nodes; G-Loss needs at least one of each. "
        "Use a larger batch or a gamma_keep further from 0 and 1.")
  return num_labelled


def resolve_gamma(gamma_keep: Optional[float] = None, gamma_hide: Optional[float] = None) -> float:
  """Returns gamma_keep from exactly one of gamma_keep or gamma_hide = 1 - gamma_keep.

  The paper's text calls gamma a "label hiding ratio", but its code keeps a fraction
  gamma of the labels; acl-jax names the kept fraction gamma_keep.
  """
  if (gamma_keep is None) == (gamma_hide is None):
    raise ValueError(
        "Give exactly one of gamma_keep (fraction of labels kept, default 0.7) or gamma_hide "
        f"(= 1 - gamma_keep); got gamma_keep={gamma_keep!r}, gamma_hide={gamma_hide!r}.")
  if gamma_keep is None:
    if not 0.0 < float(gamma_hide) < 1.0:
      raise ValueError(f"gamma_hide must lie in (0, 1), got {gamma_hide!r}.")
    gamma_keep = 1.0 - float(gamma_hide)
  check_gamma_keep(gamma_keep)
  return float(gamma_keep)


def check_labels(labels, num_classes: int) -> None:
  """Host-side check that concrete labels are ints in [0, num_classes)."""
  labels = np.asarray(labels)
  if labels.size == 0:
    return
  if not np.issubdtype(labels.dtype, np.integer):
    raise ValueError(f"labels must be integers, got dtype {labels.dtype}.")
  lo, hi = int(labels.min()), int(labels.max())
  if lo < 0 or hi >= num_classes:
    raise ValueError(
        f"labels must lie in [0, {num_classes}) for num_classes={num_classes}, but range over "
        f"[{lo}, {hi}]. Set num_classes to at least {hi + 1} or fix the label map.")


def transition_matrix(x: jax.Array, sigma, w_floor: float = DEFAULT_W_FLOOR,
                      node_mask: Optional[jax.Array] = None) -> jax.Array:
  """Row-stochastic transition matrix T of the batch graph.

  W_ij = exp(-||x_i - x_j||^2 / (2 sigma^2)) on unit-normalised rows, W_ii = 0;
  A = D^-1/2 W D^-1/2; T = A normalised by columns, then by rows (as the official code).

  A small sigma underflows every weight to 0, leaving D = 0. Because A and T do not change
  when W is scaled by a constant, W is divided by its largest off-diagonal entry (a shift
  in log space, kept in the gradient so it stays exact), and `w_floor` is added to every
  off-diagonal entry. The graph is then complete, so T is well defined and every hidden
  node reaches a labelled one.

  The floor leaves T nearly unchanged only where the kernel weights are well above it. An
  edge whose weight is below w_floor times the strongest edge's is mostly floor, and its
  gradient is at most that small (exactly 0 once the exponential underflows). With a sigma
  so small that every edge but the strongest falls below the floor (e.g. sigma=0.01 on
  sentence features), T is the floor's uniform graph whatever the features are: G-Loss is
  then a constant with exactly zero gradient. The training loop reports the share of such
  edges on the pretrained features and warns when it is high (`gloss_floor_share`).

  Args:
    x: [n, hidden] features; normalised here.
    sigma: kernel width > 0 (too small a width leaves the graph at the floor, see
      above).
    w_floor: off-diagonal weight floor, relative to the strongest edge.
    node_mask: optional [n] bool, False for padding nodes: they get no edges (zero rows
      and columns of T), and the graph of the others is exactly the graph without them.

  Returns:
    [n, n] T with zero diagonal and unit row sums (zero rows for padding nodes).
  """
  n = x.shape[0]
  x = safe_normalize(x.astype(jnp.promote_types(x.dtype, jnp.float32)))
  sq_norm = jnp.sum(x * x, axis=-1)
  # Clipped at 0: the Gram form can dip below it by round-off.
  sq_dist = jnp.maximum(sq_norm[:, None] + sq_norm[None, :] - 2.0 * (x @ x.T), 0.0)
  edge = ~jnp.eye(n, dtype=bool)
  if node_mask is not None:
    edge = edge & node_mask[:, None] & node_mask[None, :]
  log_w = -sq_dist / (2.0 * sigma * sigma)
  log_w_max = jnp.max(jnp.where(edge, log_w, -jnp.inf))
  w = jnp.where(edge, jnp.exp(jnp.where(edge, log_w - log_w_max, 0.0)) + w_floor, 0.0)
  # Padding nodes have zero degree: their rows and columns stay 0 instead of 0/0.
  nonzero = lambda v: jnp.where(v > 0, v, 1.0)
  d = jnp.sum(w, axis=-1)
  d_inv_sqrt = jnp.where(d > 0, jax.lax.rsqrt(nonzero(d)), 0.0)
  a = w * d_inv_sqrt[:, None] * d_inv_sqrt[None, :]
  t = a / nonzero(jnp.sum(a, axis=0, keepdims=True))
  return t / nonzero(jnp.sum(t, axis=1, keepdims=True))


def propagate(
    x: jax.Array,
    y_labeled: jax.Array,
    sigma,
    w_floor: float = DEFAULT_W_FLOOR,
) -> jax.Array:
  """Closed-form (harmonic) label propagation, F_U = (I - T_UU)^-1 T_UL Y_L.

  The first m rows of x are the labelled nodes, the remaining n - m the hidden ones.
  Differentiable with respect to x.

  Args:
    x: [n, hidden] node features (raw; normalised inside).
    y_labeled: [m, K] one-hot labels of the first m nodes, 0 < m < n.
    sigma: kernel width > 0; too small a width makes F_U constant in x (see
      `transition_matrix`).
    w_floor: see `transition_matrix`.

  Returns:
    [n - m, K] F_U; each row is a distribution over the K classes.
  """
  n, m = x.shape[0], y_labeled.shape[0]
  if not 0 < m < n:
    raise ValueError(f"propagate needs 0 < m < n labelled nodes; got m={m}, n={n}.")
  t = transition_matrix(x, sigma, w_floor)
  t_uu, t_ul = t[m:, m:], t[m:, :m]
  rhs = t_ul @ y_labeled.astype(t.dtype)
  f_u = jnp.linalg.solve(jnp.eye(n - m, dtype=t.dtype) - t_uu, rhs)
  # Rows already sum to 1 in exact arithmetic (T is row-stochastic); renormalising only
  # removes round-off when a hidden cluster hangs on to the labelled nodes by weak edges.
  return f_u / jnp.sum(f_u, axis=-1, keepdims=True)


def gloss(
    feats: jax.Array,
    labels: jax.Array,
    key: jax.Array,
    num_classes: int,
    sigma: float,
    gamma_keep: float = 0.7,
    form: str = "clean",
    class_weights: Optional[jax.Array] = None,
    eps: float = 1e-8,
    w_floor: float = DEFAULT_W_FLOOR,
    example_mask: Optional[jax.Array] = None,
    example_ids: Optional[jax.Array] = None,
) -> tuple[jax.Array, dict]:
  """G-Loss: hide some batch labels, propagate the rest, score the hidden ones.

  A random permutation orders the batch; its first n_L = round(gamma_keep * B) items keep
  their labels and the other B - n_L are hidden (see `check_gamma_keep`). The permutation
  sorts the items by a hash of (key, example id), so whether an example is hidden is a
  function of the step's key and the ids of the examples in the graph, not of their rows:
  a graph over the gathered global batch splits alike on any device count.
  With `example_mask`, padding rows (mask 0) leave the graph: the split keeps the first
  round(gamma_keep * B_real) real items of the same order, and a batch without padding
  takes the unmasked computation.

  Forms:
    clean (default): mean over hidden u of -log(max(F_U[u, y_u], eps)); with
      class_weights, the torch-style weighted mean instead.
    official: the reference code's loss, cross-entropy with F_U used as logits (softmax
      over each F_U row), class-weighted as torch's `CrossEntropyLoss(weight=...)`, then
      divided by |U|.

  Args:
    feats: [batch, hidden] features x = z^(M) (raw; normalised inside).
    labels: [batch] int labels in [0, num_classes).
    key: PRNG key for the labelled/hidden split.
    num_classes: K.
    sigma: kernel width > 0; too small a width makes the loss a constant with zero
      gradient (see `transition_matrix`).
    gamma_keep: fraction of labels kept, in (0, 1). (Not the paper's "hiding ratio"
      wording; gamma_hide = 1 - gamma_keep, see `resolve_gamma`.)
    form: "clean" or "official".
    class_weights: optional [num_classes] weights (e.g. `balanced_class_weights`).
    eps: clip for the log in the clean form.
    w_floor: see `transition_matrix`.
    example_mask: optional [batch] float, 0 for padding rows.
    example_ids: optional [batch] distinct global example ids (default: the row numbers).

  Returns:
    loss: scalar (0 when fewer than two rows are real: no hidden node is left).
    aux: {"lp_acc": accuracy of argmax F_U against the hidden labels, "lp_unreachable":
      the share of hidden items whose class no kept item has (`unreachable_share`)}.
  """
  check_known(form, GLOSS_FORMS, "G-Loss form")
  check_sigma(sigma)
  batch = feats.shape[0]
  num_labelled = check_gamma_keep(gamma_keep, batch)
  if int(num_classes) < 1:
    raise ValueError(f"num_classes must be >= 1, got {num_classes!r}.")

  perm = split_order(key, jnp.arange(batch) if example_ids is None else example_ids)
  x, y = feats[perm], labels[perm].astype(jnp.int32)
  cw = None if class_weights is None else jnp.asarray(class_weights, jnp.float32)
  full = lambda x, y: _gloss_split(x, y, num_labelled, num_classes, sigma, form, cw, eps,
                                   w_floor)
  if example_mask is None:
    return full(x, y)
  real = example_mask[perm] > 0
  return jax.lax.cond(  # a batch without padding takes the unmasked path
      jnp.all(real), full,
      lambda x, y: _gloss_masked(x, y, real, gamma_keep, num_classes, sigma, form, cw, eps,
                                 w_floor), x, y)


def unreachable_share(labels, num_classes: int, graph_size: int, gamma_keep: float,
                      class_weights=None, draws: int = 20000, seed: int = 0
                      ) -> tuple[float, float]:
  """How much of G-Loss cannot reach its target, expected over uniform batch graphs.

  Propagation gives a hidden item's class mass only through kept items of that class. A hidden
  item whose class has no kept item in its graph gets F_U[u, y_u] = 0 whatever the features:
  in the clean form its term is the clipped constant -log(eps), with no gradient. With n_L =
  round(gamma_keep * graph_size) kept items drawn uniformly from the N - 1 other examples, a
  hidden item of class c (n_c examples) is unreachable with probability
  C(N - n_c, n_L) / C(N - 1, n_L). Graphs are uniform samples of the train split, as the
  default packed batches draw them (`task.packing`); unpacked batches group similar lengths.

  Args:
    labels: [N] int training labels, in [0, num_classes).
    num_classes: K.
    graph_size: the nodes of one batch graph (the per-device batch, or the global batch
      with loss.gloss_global).
    gamma_keep: the kept fraction.
    class_weights: optional [K] weights of the loss's weighted mean.
    draws, seed: the simulation of the weighted share.

  Returns:
    (items, weight): the expected share of a graph's hidden items that are unreachable
    (exact, from the formula above); and the expected share of one step's class weight on
    them, which is how much of a step's weighted loss they hold (it divides by the graph's
    hidden weight): simulated over `draws` seeded uniform graphs, leaving out graphs whose
    hidden items weigh nothing. Without class weights the two are equal.
  """
  n_l = check_gamma_keep(gamma_keep, graph_size)
  labels = np.asarray(labels, np.int64)
  counts = np.bincount(labels, minlength=num_classes).astype(np.float64)
  total = len(labels)
  if total < graph_size:
    raise ValueError(f"{total} examples make no batch graph of {graph_size} nodes.")

  def log_choose(a, k):
    return math.lgamma(a + 1) - math.lgamma(k + 1) - math.lgamma(a - k + 1)
  p = np.array([math.exp(log_choose(total - n, n_l) - log_choose(total - 1, n_l))
                if total - n >= n_l else 0.0 for n in counts])
  items = float(np.sum(counts * p) / total)
  if class_weights is None:
    return items, items
  w = np.asarray(class_weights, np.float64)[labels]
  rng = np.random.default_rng(seed)
  shares = []
  for _ in range(draws):
    graph = rng.choice(total, graph_size, replace=False)
    kept = np.zeros(num_classes, bool)
    kept[labels[graph[:n_l]]] = True
    hidden = graph[n_l:]
    weight = w[hidden].sum()
    if weight > 0:
      shares.append(w[hidden][~kept[labels[hidden]]].sum() / weight)
  return items, float(np.mean(shares)) if shares else 0.0


def split_order(key: jax.Array, example_ids: jax.Array) -> jax.Array:
  """[n] the permutation that sorts examples by threefry2x32(key, (id, 0)), a uniform random
  order of the ids that each example's hash fixes whatever its row."""
  k = jax.random.key_data(key).reshape(-1)
  ids = example_ids.astype(jnp.uint32)
  score = threefry2x32(k[0], k[1], ids, jnp.zeros_like(ids))
  return jnp.argsort(score, stable=True)


def _nll(f_u, y_u, weights, num_hidden, form, eps):
  """The weighted loss of F_U rows against their hidden labels (see `gloss`'s forms)."""
  target = jax.nn.one_hot(y_u, f_u.shape[-1], dtype=f_u.dtype)
  # Zero weight on every hidden label (possible with class weights) gives 0, not NaN.
  weight_sum = jnp.sum(weights)
  safe_weight_sum = jnp.where(weight_sum > 0, weight_sum, 1.0)
  if form == "clean":
    p_true = jnp.sum(f_u * target, axis=-1)
    nll = -jnp.log(jnp.clip(p_true, eps, 1.0))
    return jnp.sum(weights * nll) / safe_weight_sum
  nll = -jnp.sum(jax.nn.log_softmax(f_u, axis=-1) * target, axis=-1)
  return jnp.sum(weights * nll) / safe_weight_sum / num_hidden


def _gloss_split(x, y, num_labelled, num_classes, sigma, form, class_weights, eps, w_floor):
  """G-Loss on an ordered batch whose first `num_labelled` rows keep their labels."""
  y_l = jax.nn.one_hot(y[:num_labelled], num_classes, dtype=jnp.float32)
  y_u = y[num_labelled:]
  f_u = propagate(x, y_l, sigma, w_floor)
  weights = jnp.ones(y_u.shape, f_u.dtype)
  if class_weights is not None:
    weights = class_weights.astype(f_u.dtype)[y_u]
  loss = _nll(f_u, y_u, weights, x.shape[0] - num_labelled, form, eps)
  lp_acc = jnp.mean((jnp.argmax(f_u, axis=-1) == y_u).astype(jnp.float32))
  # A hidden item whose class no kept item has gets no mass on it, whatever the features.
  reached = jnp.take(jnp.sum(y_l, axis=0) > 0, y_u)
  return loss, {"lp_acc": lp_acc, "lp_unreachable": 1.0 - jnp.mean(reached.astype(jnp.float32))}


def _gloss_masked(x, y, real, gamma_keep, num_classes, sigma, form, class_weights, eps, w_floor):
  """G-Loss on an ordered batch with padding rows (`real` False): the first
  round(gamma_keep * B_real) real rows keep their labels, the other real rows are hidden.

  The shapes stay static: label propagation is solved over all B rows, with identity rows
  for every node that is not hidden, which gives the harmonic F_U of the real graph."""
  n_real = jnp.sum(real.astype(jnp.int32))
  # n_L for every possible real count, from the host rule the unmasked path uses.
  kept = np.array([_round_kept(gamma_keep, n) for n in range(x.shape[0] + 1)], np.int32)
  n_keep = jnp.clip(jnp.asarray(kept)[n_real], 1, jnp.maximum(n_real - 1, 1))
  rank = jnp.cumsum(real.astype(jnp.int32)) - 1  # position among the real rows
  lab, hid = real & (rank < n_keep), real & (rank >= n_keep)
  t = transition_matrix(x, sigma, w_floor, node_mask=real)
  u, l = hid.astype(t.dtype), lab.astype(t.dtype)
  y_l = jax.nn.one_hot(y, num_classes, dtype=t.dtype) * l[:, None]
  system = jnp.eye(x.shape[0], dtype=t.dtype) - u[:, None] * t * u[None, :]
  f = jnp.linalg.solve(system, u[:, None] * (t @ y_l))
  row = jnp.sum(f, axis=-1, keepdims=True)
  f = f / jnp.where(row > 0, row, 1.0)
  weights = u if class_weights is None else u * class_weights.astype(t.dtype)[y]
  num_hidden = jnp.maximum(jnp.sum(u), 1.0)
  loss = _nll(f, y, weights, num_hidden, form, eps)
  lp_acc = jnp.sum(u * (jnp.argmax(f, axis=-1) == y)) / num_hidden
  reached = jnp.take(jnp.sum(y_l, axis=0) > 0, y)
  lp_unreachable = jnp.sum(u * (1.0 - reached.astype(t.dtype))) / num_hidden
  return loss, {"lp_acc": lp_acc, "lp_unreachable": lp_unreachable}


def sigma_sqrt_heuristic(embeddings: np.ndarray, max_rows: int = 2000, seed: int = 0) -> float:
  """The `sqrt` sigma heuristic: sqrt(median pairwise Euclidean distance / 3).

  Computed on unit-normalised rows (distances lie in [0, 2]). For speed at most
  `max_rows` rows are used, a subsample drawn without replacement with a fixed seed, so
  the value is deterministic; the median of ~2M pairs is stable to a few decimals.

  Args:
    embeddings: [N, hidden] pretrained train embeddings, N >= 2.
    max_rows: subsample size cap.
    seed: subsample seed.

  Returns:
    sigma as a Python float.
  """
  x = np.asarray(embeddings, np.float64)
  if x.ndim != 2 or x.shape[0] < 2:
    raise ValueError(
        f"sigma_sqrt_heuristic needs [N >= 2, hidden] embeddings, got shape {x.shape}.")
  if x.shape[0] > max_rows:
    rows = np.random.default_rng(seed).choice(x.shape[0], max_rows, replace=False)
    x = x[np.sort(rows)]
  x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
  sq_norm = np.sum(x * x, axis=1)
  sq_dist = sq_norm[:, None] + sq_norm[None, :] - 2.0 * (x @ x.T)
  upper = np.triu_indices(x.shape[0], k=1)
  dist = np.sqrt(np.maximum(sq_dist[upper], 0.0))
  return float(np.sqrt(np.median(dist) / 3.0))


# A G-Loss run warns when more than this share of its batch graph's edges sit at the weight
# floor on the pretrained features (`gloss_floor_share`).
FLOOR_SHARE_WARN = 0.9


def gloss_floor_share(feats: np.ndarray, sigma: float, graph_size: int,
                      w_floor: float = DEFAULT_W_FLOOR) -> float:
  """The share of G-Loss graph edges whose kernel weight is below the weight floor.

  `losses.transition_matrix` divides the weights by the strongest edge's and adds `w_floor`;
  an edge below the floor carries (almost) no gradient. The strongest edge (both directions)
  is never there, so the share counts the other edges: at 1, G-Loss is a constant with exactly
  zero gradient, whatever the graph size.

  Args:
    feats: [n, hidden] features, e.g. the pretrained model's on a sample of train examples.
    sigma: the kernel width.
    graph_size: nodes per graph (the batch each device builds one on); `feats` is cut into
      consecutive graphs of this size (fewer rows make one graph of them all).
    w_floor: the floor, relative to the strongest edge.

  Returns:
    The mean share over the graphs, in [0, 1].
  """
  x = np.asarray(feats, np.float64)
  x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
  g = min(graph_size, len(x))
  if g < 2:
    return 0.0
  off = ~np.eye(g, dtype=bool)
  shares = []
  for i in range(0, len(x) - g + 1, g):
    b = x[i:i + g]
    log_w = -np.maximum(2.0 - 2.0 * (b @ b.T), 0.0)[off] / (2.0 * sigma * sigma)
    # In log space: the relative weights themselves underflow at small sigma.
    below = np.sum(log_w - log_w.max() < np.log(w_floor))
    shares.append(below / max(log_w.size - 2, 1))
  return float(np.mean(shares))
