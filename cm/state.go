package cm

import (
	"errors"
	"fmt"
)

// State is the state of an ID, as iw_cm's enum iw_cm_state
// (drivers/infiniband/core/iwcm.h, iwcm.c). See the package documentation
// for the transition diagram.
type State uint8

// ID states.
const (
	StateIdle        State = iota // IW_CM_STATE_IDLE
	StateListen                   // IW_CM_STATE_LISTEN
	StateConnRecv                 // IW_CM_STATE_CONN_RECV: a Request waits for Accept or Reject
	StateConnSent                 // IW_CM_STATE_CONN_SENT: Connect waits for the Reply
	StateEstablished              // IW_CM_STATE_ESTABLISHED
	StateClosing                  // IW_CM_STATE_CLOSING: disconnecting; Close follows
	StateDestroying               // IW_CM_STATE_DESTROYING: Destroy was called
)

var stateNames = [...]string{
	StateIdle:        "IDLE",
	StateListen:      "LISTEN",
	StateConnRecv:    "CONN_RECV",
	StateConnSent:    "CONN_SENT",
	StateEstablished: "ESTABLISHED",
	StateClosing:     "CLOSING",
	StateDestroying:  "DESTROYING",
}

// String returns iw_cm's name for the state ("CONN_RECV").
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("unknown(%d)", uint8(s))
}

// transitions lists, per state, the states it may move to (iwcm.c).
var transitions = [...][]State{
	StateIdle:        {StateListen, StateConnSent, StateDestroying},
	StateListen:      {StateDestroying},
	StateConnRecv:    {StateEstablished, StateIdle, StateDestroying},
	StateConnSent:    {StateEstablished, StateIdle, StateDestroying},
	StateEstablished: {StateClosing, StateDestroying},
	StateClosing:     {StateIdle, StateDestroying},
	StateDestroying:  nil,
}

// canGo reports whether s may move to t.
func (s State) canGo(t State) bool {
	if int(s) >= len(transitions) {
		return false
	}
	for _, u := range transitions[s] {
		if u == t {
			return true
		}
	}
	return false
}

// ErrInvalidState matches every *StateError with errors.Is.
var ErrInvalidState = errors.New("cm: operation not allowed in this state")

// StateError reports an operation called in a state that does not allow
// it (iw_cm returns -EINVAL).
type StateError struct {
	// Op is the refused operation ("accept").
	Op string
	// State is the ID's state at the time.
	State State
	// Reason adds detail ("an answer is in progress", "ID already used").
	Reason string
}

// Error describes the refusal.
func (e *StateError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("cm: %s in state %v: %s", e.Op, e.State, e.Reason)
	}
	return fmt.Sprintf("cm: %s in state %v not allowed", e.Op, e.State)
}

// Is makes errors.Is(err, ErrInvalidState) true.
func (e *StateError) Is(t error) bool { return t == ErrInvalidState }
