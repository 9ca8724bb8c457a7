"""The config repo: git verbs, workspaces, the index, fast-import, temporary clones."""
