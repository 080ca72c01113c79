import os

# Without these a Hub lookup retries for ~50 s before failing on a machine without network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
