"""Readers of the files users already have (CIFAR python tarballs, MNIST IDX files, image
folders), each turning them into plain NumPy arrays or (path, class) lists for
`jaxsel prepare`. Bad input raises `FormatError`: one line naming the file and what is wrong."""


class FormatError(ValueError):
    """A source file or folder is not in the format `jaxsel prepare` expects (exit 2)."""
