"""Data-free toy experiments: the two-client 2-D Gaussian of FedEP (spec 002 §3.1) in ``gaussian2d``, and
BayesADMM's convex toys (spec 001 §4.8) in ``bayesadmm``."""
