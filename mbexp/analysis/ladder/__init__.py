"""Size ladders (docs/ladders.md, docs/ladder-fits.md): sizes (what makes an experiment a ladder), trend (the
fit-free trend of Δ over size), powerlaw (the curve and its fit), batch (a bootstrap's refits at once), draws (the
bootstrap over seeds), scaling (the fit of a ladder, its multipliers and predictions), checks (lack of fit,
robustness panel), decision (decision accuracy) and render (markdown, CSV, figure)."""
