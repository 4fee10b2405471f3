"""Using a trained model: the :class:`~attnlab.inference.translator.Translator` (text in, text
out), model directories (:mod:`.modeldir`), the longest source it takes (:mod:`.bounds`), and
scores: BLEU, chrF, exact match, perplexity, accuracy (:mod:`.scores`)."""
