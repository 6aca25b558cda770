from memfs.cli import script

script()
