"""One-release shims: what the last release accepted and this one still reads, each in a
module of its own that names the release that removes it (`REMOVED_IN`).

A shim is read where its value enters (a parser, a strategy's constructor) and warns with a
`notes.NotedDeprecation`, which the command line prints once as a one-line note. This
package sits just above the device core: the strategies, the run and the command line use
it; the core knows nothing of it. Last release's flags stay with the parser that reads
them (`cli/deprecated.py`), and last release's trait attributes with the traits
(`strategies/traits.py`): each is read through the layer it belongs to.
"""
