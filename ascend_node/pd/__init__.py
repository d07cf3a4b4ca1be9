"""A PD-disaggregated MindIE service (MindIE-Motor): the global rank table (docs/pd.md).

`global_table` builds the table the controller reads from the instances' completed rank
tables (pure, stable group numbers); `motor_rules` holds the controller's loader rules and
the P/D flag contract, for `validate --global` and for the writer; `write` puts the table
at a path the controller accepts, by rename.
"""
