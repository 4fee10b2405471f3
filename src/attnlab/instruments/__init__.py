"""Instruments that show how the Transformer works: exact MAC / FLOP counts (:mod:`.flops`),
pictures (:mod:`.viz`, with matplotlib) and the tutorial's claims run as experiments
(:mod:`.explain`). Imported on demand: ``from attnlab.instruments import flops``."""
