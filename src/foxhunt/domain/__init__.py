"""What every stage of the data flow shares: the traded instrument, the action branches and their
codec, the triple barrier with its parameters, and the one enum of why a position exits.

Nothing here imports a stage (data, features, validation, env, agent, train, backtest, report): each
of them imports its shared concepts from here, so a concept has one home whichever stage used it
first (docs/design.md §0).
"""
