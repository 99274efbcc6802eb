"""What the built-in methods share: the ``Method`` base and its local loops (``base``, ``local``, ``batched``), IVON
(``ivon``), curvature (``curvature``), compiled kernels (``kernels``) and the hyperparameter groups
several methods' ``Params`` extend (``params``, torch-free). A method's own package
(``fedbayes.methods.<key>``) holds its spec (``__init__``) and its math (``algorithm``)."""
