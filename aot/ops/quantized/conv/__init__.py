"""ConvInteger and QLinearConv, laid out as the float convolutions (aot/ops/conv/): algorithm.py
picks a form and lists the alternatives a --max-arena plan may trade, lowering.py validates the
node and emits the form, one module per form."""
