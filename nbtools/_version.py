"""nbtools' version, in a leaf so that the modules that state it (the model card, job metadata, evidence) need not
import the package facade above them."""

__version__ = "0.1.0"  # pyproject.toml's [project] version
