//! Policy documents, shell-aware classification and request digests.
