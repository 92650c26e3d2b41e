package rdmap

import "fmt"

// QPState is the state of a queue pair (RFC 5040 §5.4's "RDMAP stream"
// states as Linux siw models them, siw_qp.c):
//
//	       Start                     Disconnect(graceful), peer FIN
//	IDLE ---------> RTS --------------------------------------> CLOSING
//	 | \             | \  error detected here: send a Terminate     |
//	 |  \(RTR)       |  `-------------------------> TERMINATE       |
//	 |               | Disconnect(abrupt), LLP       |  Terminate   |
//	 |               | lost, Terminate received      |  sent, LLP   | LLP closed,
//	 |  Close        v                               v  closed      | error
//	 `----------> ERROR <----------------------------+--------------'
//
// RTR exists for parity with siw and verbs (IDLE -> RTR -> RTS) but the
// connection manager moves a QP straight to RTS with Start. ERROR is
// final: every outstanding work request has been completed or flushed,
// and new ones complete at once with WCWRFlushErr.
type QPState uint8

// QP states.
const (
	StateIdle QPState = iota
	StateRTR
	StateRTS
	StateClosing
	StateTerminate
	StateError
)

var qpStateNames = [...]string{"IDLE", "RTR", "RTS", "CLOSING", "TERMINATE", "ERROR"}

func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return fmt.Sprintf("unknown(%d)", uint8(s))
}

// qpTransitions lists the legal next states of each state.
var qpTransitions = [...][]QPState{
	StateIdle:      {StateRTR, StateRTS, StateError},
	StateRTR:       {StateRTS, StateError},
	StateRTS:       {StateClosing, StateTerminate, StateError},
	StateClosing:   {StateTerminate, StateError},
	StateTerminate: {StateError},
	StateError:     {},
}

// legalTransition reports whether from -> to is allowed.
func legalTransition(from, to QPState) bool {
	if int(from) >= len(qpTransitions) {
		return false
	}
	for _, s := range qpTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// errIllegalTransition is returned (and, in race-detector builds,
// panicked with) for a state change the diagram does not have.
type errIllegalTransition struct{ from, to QPState }

func (e *errIllegalTransition) Error() string {
	return fmt.Sprintf("rdmap: illegal QP state transition %s -> %s", e.from, e.to)
}
