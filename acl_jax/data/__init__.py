"""acl_jax.data: task registry, readers, tokenisation and batching."""
from acl_jax.data.batching import bucket_boundaries
from acl_jax.data.batching import eval_batches
from acl_jax.data.batching import make_batch
from acl_jax.data.batching import num_train_batches
from acl_jax.data.batching import process_slice
from acl_jax.data.batching import to_columns
from acl_jax.data.batching import train_batches
from acl_jax.data.batching import train_plan
from acl_jax.data.tasks import TASKS
from acl_jax.data.tasks import TaskData
from acl_jax.data.tasks import TaskSpec
from acl_jax.data.tasks import get_task
from acl_jax.data.tasks import load_task
from acl_jax.data.tokenize import tokenize_dataset
