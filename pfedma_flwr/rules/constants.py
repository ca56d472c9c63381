"""The seed's constants of rule co-evolution: the one place their defaults are written.

The config (``rules.sim_threshold``, ``rules.phi_default``) and every signature that takes them
default to these (issue 31 item 1: a default changed here is changed everywhere).
"""

#: cosine similarity at which two rules state the same semantic constraint (seed: 0.9)
SIM_THRESHOLD = 0.9
#: a global rule without local counterpart is adopted iff its utility exceeds this (seed: 0.3)
PHI_DEFAULT = 0.3
