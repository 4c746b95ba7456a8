//! The policy service: decisions, approvals and the ledger behind them.
