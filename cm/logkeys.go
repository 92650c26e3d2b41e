package cm

// Log field keys, one spelling each, so that every log line names a
// field the same way.
const (
	keyCMID     = "cm_id"
	keyListener = "listener_id"
	keyState    = "state"
	keyTo       = "to"
	keyLocal    = "local"
	keyRemote   = "remote"
	keyBacklog  = "backlog"
	keyBackoff  = "backoff"
	keyAnswer   = "answer"
	keyReason   = "reason"
	keyEvent    = "event"
	keyStatus   = "status"
	keyAbrupt   = "abrupt"
	keyRev      = "mpa_rev"
	keyEnhanced = "enhanced"
	keyIRD      = "ird"
	keyORD      = "ord"
	keyCRC      = "crc"
	keyP2P      = "p2p"
	keyRTR      = "rtr"
	keyPDLen    = "private_data_len"
)
