package dynamo

// The table layout lives here once: the local bootstrap turns it into
// CreateTable calls and the CDK app (infra/) into TableV2 constructs, so
// the two can never drift.

// AttrType is a DynamoDB key attribute type.
type AttrType string

// Key attribute types.
const (
	AttrString AttrType = "S"
	AttrNumber AttrType = "N"
)

// KeyAttr names one key attribute.
type KeyAttr struct {
	Name string
	Type AttrType
}

// Projection is which attributes a global secondary index copies.
type Projection string

// Projections. An index entry is rewritten whenever an attribute it
// projects changes: ALL makes every write of the item a write of the index
// (at the item's size); KEYS_ONLY only a change of its keys.
const (
	ProjectAll      Projection = "ALL"
	ProjectKeysOnly Projection = "KEYS_ONLY"
	// ProjectInclude copies the keys and IndexDef.Include.
	ProjectInclude Projection = "INCLUDE"
)

// IndexDef is a global secondary index.
type IndexDef struct {
	Name         string
	PartitionKey KeyAttr
	SortKey      *KeyAttr
	Projection   Projection
	// Include names the attributes an INCLUDE projection copies.
	Include []string
}

// TableDef is one table: its logical name (the physical name is chosen per
// environment), keys and indexes. All tables are on-demand.
type TableDef struct {
	Logical      string
	PartitionKey KeyAttr
	SortKey      *KeyAttr
	Indexes      []IndexDef
	// TTL names the attribute DynamoDB expires items by (epoch seconds);
	// empty for none. Reads never rely on it: an expired item stays
	// readable until DynamoDB gets to it, so the store filters it out.
	TTL string
}

// Attribute and index names shared by the store and the infrastructure.
const (
	AttrID          = "id"
	AttrOwner       = "owner"
	AttrOwnerSort   = "owner_sort"
	AttrJobID       = "job_id"
	AttrNumberKey   = "number"
	AttrContractKey = "contract_key"
	AttrProviderKey = "provider_key"
	AttrOpenShard   = "open_shard"
	AttrProvider    = "provider"
	AttrBusyShard   = "busy_shard"

	AttrNotifyShard = "notify_shard"
	AttrPollShard   = "poll_shard"
	AttrPollAt      = "poll_at"
	AttrEndpointID  = "endpoint_id"
	AttrDelivery    = "delivery"
	AttrDueShard    = "due_shard"
	AttrNextAt      = "next_at"
	// AttrPos is a streamed chunk's place in its job's log: job.ChunkPos.
	AttrPos = "pos"

	AttrInboundKey = "inbound_key"
	AttrBatchID    = "batch_id"

	IndexByOwner = "by_owner"
	IndexByOpen  = "by_open"
	IndexByBusy  = "by_busy"
	// IndexByNotify lists jobs whose outbox holds events not yet fanned
	// out; IndexByDue the deliveries due for a try.
	IndexByNotify = "by_notify"
	IndexByDue    = "by_due"
	// IndexByPoll lists jobs with work at a provider, by when something of
	// it is next due (job.DueAt): the scheduled pass's list.
	IndexByPoll = "by_poll"
)

// The table definitions are functions, not variables, so that no importer
// can change the schema for everyone: each call builds a fresh value.

// JobsTable holds one item per job, keyed by the job ID (which is derived
// from owner and idempotency key, so uniqueness is a single conditional put).
func JobsTable() TableDef {
	return TableDef{
		Logical:      "jobs",
		PartitionKey: KeyAttr{Name: AttrID, Type: AttrString},
		// A finished job goes a retention after its outcome.
		TTL: aExpiresAt,
		Indexes: []IndexDef{{
			Name:         IndexByOwner,
			PartitionKey: KeyAttr{Name: AttrOwner, Type: AttrString},
			SortKey:      &KeyAttr{Name: AttrOwnerSort, Type: AttrString},
			// The listing reads whole jobs from it.
			Projection: ProjectAll,
		}, {
			// Sparse: only jobs without an outcome carry open_shard, so the
			// sweeper reads open jobs without scanning finished ones. Keys
			// and the owner only (the owners' counters are recounted from
			// it), spread over OpenShards partitions: an entry is written
			// when its job is created and deleted when it ends, never in
			// between (the owner never changes), so the index is no
			// ceiling on the account's jobs per second (docs/capacity.md).
			Name:         IndexByOpen,
			PartitionKey: KeyAttr{Name: AttrOpenShard, Type: AttrString},
			SortKey:      &KeyAttr{Name: AttrOwnerSort, Type: AttrString},
			Projection:   ProjectInclude,
			Include:      []string{AttrOwner},
		}, {
			// Sparse: only a job whose outbox holds notices not yet fanned
			// out carries notify_shard (set by the write that records the
			// event, removed when the notifier has fanned it out), so jobs
			// of owners without endpoints never enter it.
			Name:         IndexByNotify,
			PartitionKey: KeyAttr{Name: AttrNotifyShard, Type: AttrString},
			SortKey:      &KeyAttr{Name: AttrOwnerSort, Type: AttrString},
			Projection:   ProjectKeysOnly,
		}, {
			// Sparse: only a job with work at a provider in flight carries
			// poll_shard, sorted by poll_at, the soonest moment something
			// of that work is due (a poll, a cancel, its deadline:
			// job.DueAt), set by the write that changes it, removed by the
			// one that ends the work. The scheduled pass reads what is due
			// from it; jobs that never wait on a provider never enter it.
			Name:         IndexByPoll,
			PartitionKey: KeyAttr{Name: AttrPollShard, Type: AttrString},
			SortKey:      &KeyAttr{Name: AttrPollAt, Type: AttrString},
			Projection:   ProjectKeysOnly,
		}},
	}
}

// AttemptsTable is the attempt ledger: one item per (job, attempt number).
func AttemptsTable() TableDef {
	return TableDef{
		Logical:      "attempts",
		PartitionKey: KeyAttr{Name: AttrJobID, Type: AttrString},
		SortKey:      &KeyAttr{Name: AttrNumberKey, Type: AttrNumber},
		TTL:          aExpiresAt,
	}
}

// CertificationsTable records contract-test certifications per
// (job type contract, provider).
func CertificationsTable() TableDef {
	return TableDef{
		Logical:      "certifications",
		PartitionKey: KeyAttr{Name: AttrContractKey, Type: AttrString},
		SortKey:      &KeyAttr{Name: AttrProviderKey, Type: AttrString},
	}
}

// ProvidersTable holds each provider's health (its circuit breaker): one
// item per provider, written only when the breaker changes.
func ProvidersTable() TableDef {
	return TableDef{
		Logical:      "providers",
		PartitionKey: KeyAttr{Name: AttrProvider, Type: AttrString},
	}
}

// OwnersTable holds each owner's counters (unfinished jobs, held requests,
// notification endpoints), written by one conditional update per change.
// Owners whose counters are not zero carry busy_shard, so the sweeper
// finds them to recount without scanning the table.
func OwnersTable() TableDef {
	return TableDef{
		Logical:      "owners",
		PartitionKey: KeyAttr{Name: AttrOwner, Type: AttrString},
		Indexes: []IndexDef{{
			Name:         IndexByBusy,
			PartitionKey: KeyAttr{Name: AttrBusyShard, Type: AttrString},
			SortKey:      &KeyAttr{Name: AttrOwner, Type: AttrString},
			Projection:   ProjectKeysOnly,
		}},
	}
}

// EndpointsTable holds owners' notification endpoints (webhook endpoints
// in the API): one item per (owner, endpoint).
func EndpointsTable() TableDef {
	return TableDef{
		Logical:      "endpoints",
		PartitionKey: KeyAttr{Name: AttrOwner, Type: AttrString},
		SortKey:      &KeyAttr{Name: AttrEndpointID, Type: AttrString},
	}
}

// DeliveriesTable holds each event's delivery to each endpoint, under its
// job: one item per (job, message#endpoint), with every try.
func DeliveriesTable() TableDef {
	return TableDef{
		Logical:      "deliveries",
		PartitionKey: KeyAttr{Name: AttrJobID, Type: AttrString},
		SortKey:      &KeyAttr{Name: AttrDelivery, Type: AttrString},
		TTL:          aExpiresAt,
		Indexes: []IndexDef{{
			// Sparse: only a pending delivery carries due_shard, sorted by
			// when its next try is due. With its owner and endpoint (which
			// never change, so they cost no index write), a pass orders the
			// due deliveries fairly from the index alone and reads past one
			// owner's backlog (review N-L6).
			Name:         IndexByDue,
			PartitionKey: KeyAttr{Name: AttrDueShard, Type: AttrString},
			SortKey:      &KeyAttr{Name: AttrNextAt, Type: AttrString},
			Projection:   ProjectInclude,
			Include:      []string{AttrOwner, AttrEndpointID},
		}},
	}
}

// InboundTable remembers the providers' webhook deliveries taken lately
// (lifecycle.InboundLog): one small item per (provider, webhook-id), kept
// until its signature goes stale, then expired by TTL.
func InboundTable() TableDef {
	return TableDef{
		Logical:      "inbound",
		PartitionKey: KeyAttr{Name: AttrInboundKey, Type: AttrString},
		TTL:          aExpiresAt,
	}
}

// StreamsTable is streamed jobs' log: one item per chunk of an attempt's
// text (job.StreamChunk), under its job, sorted by attempt then seq
// (job.ChunkPos), so a reader queries each attempt past its cursor. Only
// jobs created with "stream": true write here. A chunk goes a retention
// after it was written (job.ChunkExpiry).
func StreamsTable() TableDef {
	return TableDef{
		Logical:      "streams",
		PartitionKey: KeyAttr{Name: AttrJobID, Type: AttrString},
		SortKey:      &KeyAttr{Name: AttrPos, Type: AttrString},
		TTL:          aExpiresAt,
	}
}

// BatchesTable holds the provider batches onejob sends (lifecycle.BatchStore):
// one item per batch not done, under its provider, so that the batcher
// reads a provider's open batches with one query; a batch done is deleted.
func BatchesTable() TableDef {
	return TableDef{
		Logical:      "batches",
		PartitionKey: KeyAttr{Name: AttrProvider, Type: AttrString},
		SortKey:      &KeyAttr{Name: AttrBatchID, Type: AttrString},
	}
}

// Tables lists every table the service uses.
func Tables() []TableDef {
	return []TableDef{JobsTable(), AttemptsTable(), CertificationsTable(), ProvidersTable(), OwnersTable(),
		EndpointsTable(), DeliveriesTable(), InboundTable(), StreamsTable(), BatchesTable()}
}
