package job

// DeliveryEdge is one way a webhook delivery's state changes, and the
// decisions that make it.
type DeliveryEdge struct {
	From, To DeliveryState
	By       []string
}

// deliveryEdges is the table of a delivery's state changes. The delivery
// decisions (DecideClaim, DecideTry, DecideSkip, DecideDrop, DecideRedeliver) make
// exactly these: a test drives each through every state and holds the
// table to what they do, both ways, and docs/state-machines.md is drawn
// from it. A pending delivery staying pending is a claim (its lease) or a
// failed try with the schedule not over (due again after its wait).
var deliveryEdges = []DeliveryEdge{
	{DeliveryPending, DeliveryPending, []string{
		"DecideClaim (leased to one sender until its lease passes)",
		"DecideTry (a failure, retried after the schedule's next wait or Retry-After)",
		"DecideRedeliver (the schedule starts again)"}},
	{DeliveryPending, DeliveryDelivered, []string{"DecideTry (2xx)"}},
	{DeliveryPending, DeliveryFailed, []string{"DecideTry (a failure after the schedule's last wait)"}},
	{DeliveryPending, DeliveryEndpointDisabled, []string{"DecideTry (410)", "DecideSkip (the endpoint is disabled or gone)"}},
	{DeliveryPending, DeliveryDropped, []string{"DecideDrop (its endpoint's backlog is full: never tried)"}},
	{DeliveryDelivered, DeliveryPending, []string{"DecideRedeliver"}},
	{DeliveryFailed, DeliveryPending, []string{"DecideRedeliver"}},
	{DeliveryEndpointDisabled, DeliveryPending, []string{"DecideRedeliver"}},
	{DeliveryDropped, DeliveryPending, []string{"DecideRedeliver"}},
}

// DeliveryEdges returns the table of a delivery's state changes.
func DeliveryEdges() []DeliveryEdge {
	out := make([]DeliveryEdge, len(deliveryEdges))
	for i, e := range deliveryEdges {
		out[i] = DeliveryEdge{From: e.From, To: e.To, By: append([]string(nil), e.By...)}
	}
	return out
}

// DeliveryStates lists a delivery's states, pending first.
func DeliveryStates() []DeliveryState {
	return []DeliveryState{DeliveryPending, DeliveryDelivered, DeliveryFailed, DeliveryEndpointDisabled, DeliveryDropped}
}
