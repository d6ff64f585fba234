package dynamo

import (
	"context"
	"encoding/json"
	"sort"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/job"
)

func contractKey(jobType, version string) string { return jobType + "#" + version }

// PutCertification stores the latest run for (job type contract, provider).
func (s *Store) PutCertification(ctx context.Context, c job.Certification) error {
	cases := string(c.Cases)
	if cases == "" {
		cases = "[]"
	}
	_, err := s.db.putItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(s.certs),
		Item: map[string]types.AttributeValue{
			AttrContractKey:    avS(contractKey(c.JobType, c.ContractVersion)),
			AttrProviderKey:    avS(c.Provider),
			"job_type":         avS(c.JobType),
			"contract_version": avS(c.ContractVersion),
			"model":            avS(c.Model),
			"passed":           avB(c.Passed),
			"cases":            avS(cases),
			"certified_at":     avT(c.CertifiedAt),
			"window":           avN(int64(c.Window)),
			"window_unit":      avS(c.WindowUnit),
		},
	})
	if err != nil {
		return storeError("put certification", err)
	}
	return nil
}

// Certified reports whether the provider's latest run for this exact
// contract version passed. A run for another version does not count.
func (s *Store) Certified(ctx context.Context, jobType, contractVersion, provider string) (bool, error) {
	out, err := s.db.getItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.certs),
		Key: map[string]types.AttributeValue{
			AttrContractKey: avS(contractKey(jobType, contractVersion)),
			AttrProviderKey: avS(provider),
		},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return false, storeError("get certification", err)
	}
	passed, ok := out.Item["passed"].(*types.AttributeValueMemberBOOL)
	return ok && passed.Value, nil
}

// ListCertifications returns every stored certification, by job type,
// contract version and provider.
func (s *Store) ListCertifications(ctx context.Context) ([]job.Certification, error) {
	var out []job.Certification
	var start map[string]types.AttributeValue
	for {
		res, err := s.db.scan(ctx, &dynamodb.ScanInput{TableName: aws.String(s.certs), ExclusiveStartKey: start, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return nil, storeError("list certifications", err)
		}
		for _, item := range res.Items {
			d := decoder{m: item}
			c := job.Certification{
				JobType:         d.str("job_type", true),
				ContractVersion: d.str("contract_version", true),
				Provider:        d.str(AttrProviderKey, true),
				Model:           d.str("model", false),
				Cases:           json.RawMessage(d.str("cases", false)),
				CertifiedAt:     d.time("certified_at", true),
				Window:          int(d.num("window", false)),
				WindowUnit:      d.str("window_unit", false),
			}
			if p, ok := item["passed"].(*types.AttributeValueMemberBOOL); ok {
				c.Passed = p.Value
			}
			if d.err != nil {
				return nil, d.err
			}
			out = append(out, c)
		}
		if start = res.LastEvaluatedKey; len(start) == 0 {
			break
		}
	}
	sort.Slice(out, func(i, k int) bool {
		a, b := out[i], out[k]
		if a.JobType != b.JobType {
			return a.JobType < b.JobType
		}
		if a.ContractVersion != b.ContractVersion {
			return a.ContractVersion < b.ContractVersion
		}
		return a.Provider < b.Provider
	})
	return out, nil
}
