"""LoTES (Tran et al., "Multi-stage resource-aware scheduling for data centers with
heterogeneous servers", J. Scheduling 2018): offline LPs map job classes to machine
configurations and machines to bins; online, each task goes where its machine drifts
toward its bin's mix.

    model.py     Problem, Configuration, JobClass, Plan (values)
    classes.py   k-means, classes file, nearest-class tagging, configurations, drift
    bins.py      non-dominated bins (bounded)
    lp.py        stage 1 and stage 2 LPs (HiGHS), rounding, solve()
    resolve.py   plan_for() (never raises), resolve_reason() (re-solve triggers)
    dispatch.py  stage 3 as pure functions; LotesBook (targets and running counts)
    policy.py    LotesPlacement: `--placement lotes`; anbf when there is no plan

Live wiring (the master owns the book, as it owns the NodeMatrix):
- policy = make_placement("lotes"); book = policy.book.
- Off the event loop (executor), at start and whenever resolve_reason(book.plan,
  group_configurations(nodes, kinds, label), observed_shares) is not None:
  outcome = plan_for(nodes, kinds, classes, label); then on the loop
  book.adopt(outcome.plan) or book.drop(outcome.reason); time the call and export it.
- Tag a task at submit: k = book.classify(view.request_vector(spec.resources)).
- On committing a placement: book.started(node, k); on a task's end (any terminal
  state, or a placement abandoned): book.ended(node, k); after a re-solve with new
  classes: book.recount((node, k) for every running task).
- schedule_round() calls policy.begin_round() itself.
- Targets for agents and `tcl nodes`: book.targets[node] = (configuration, bin counts);
  actual mix: book.running[node]."""
