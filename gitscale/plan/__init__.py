"""The pass: compute a plan (engine), remember between passes (cache), land it (validate, commit, push)."""
