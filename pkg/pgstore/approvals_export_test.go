package pgstore

// The statements of the approval lookups, for the test that counts the rows they read.
const (
	ApprovalsPendingSQL = approvalsPendingSQL
	ApprovalEventsSQL   = approvalEventsSQL
)
