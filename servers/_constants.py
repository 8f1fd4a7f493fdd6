"""Names and limits shared by the CLI and the servers (kept import-light: ``--help`` must be quick)."""

PROFILES = ("tools", "work", "artifacts", "agents", "memory", "rag", "gateway", "all", "conformance")
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
RECEIPT_META_KEY = "dev.openfunctions/receipt"
