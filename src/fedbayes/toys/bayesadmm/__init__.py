"""BayesADMM's convex toys (paper 001 §4 / App. F; spec 001 §4.8): Fig. 3b (one-step convergence on federated
ridge regression), Fig. 4 (2-D logistic classification with an outlier) and Fig. 3a (Bayesian multiclass
logistic regression with diagonal Gaussians: PVI, damped PVI, BregmanADMM, BayesADMM).

Written from the paper's equations (spec §2.1, §2.3, §3.2–3.5); no code of the authors' repository is used.

    data         the mnist5k digits as downsampled features and class-pair clients; Fig. 4's outlier data
    problems     client losses, the global MAP objective and its minimiser, the ridge and softmax problems
    solvers      federated ADMM, full-covariance BayesADMM / BregmanADMM, the VON client, the diagonal
                 family with IVON clients (the update equations are in its docstring)
    experiments  the runs behind each figure and the numbers the report prints
    figures      the three figures
    numerics     Newton's method, positive-definite solves, one BLAS thread

The settings (data sizes, δ, ρ, c, rounds, the VON and IVON schedules, the Fig. 3a methods) live in
params.yaml ``toys: bayesadmm/figures``; ``fedbayes.reports.toys.bayesadmm_figures`` passes them in.
"""
