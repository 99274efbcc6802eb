"""Tabular datasets (UCI Credit Approval, FLamby-Heart): registered on import."""
