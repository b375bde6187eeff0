"""Model functions shipped with the trainer as examples
(`model: "kerasjob_trainer.examples.<module>:build"`); each imports its framework lazily, so
every image can import the package."""
