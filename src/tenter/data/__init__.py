"""Dataset preparation: ``tenter data ...`` (see :mod:`tenter.data.imagenet`)."""
