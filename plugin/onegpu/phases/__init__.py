"""The phases as pytest sees them: one module of session fixtures per phase that tests_hw names (machine, plan,
probe, custody, load, canary, batch, serve), wiring the phase's pure modules to pytest and the receipt."""
