"""One run's life in one place: its identity and lock (identity), its state, files and summary (state, summary),
its checkpoints and resume (checkpoint), a WSD trunk's budget branches (branches) and how older run files are
read (migrate). The training loop (mbexp.trainer) computes; these keep count and decide."""
