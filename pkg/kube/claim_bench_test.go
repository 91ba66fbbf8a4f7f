package kube_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lardon3d/lardon3d-controller/pkg/kube"
	"github.com/lardon3d/lardon3d-controller/pkg/kube/kubetest"
	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
)

// BenchmarkClaims measures how claims scale: b.N new tasks, claimed by 1 or
// 3 nodes that each list the namespace and claim every claimable task they
// see, until all are claimed (each node one connection, one worker: the
// throughput of the API server's conditional updates, not of a governor).
// It reports the conflicts (LostRace) per task claimed.
//
//	go test -run '^$' -bench Claims -benchtime 200x ./pkg/kube/
func BenchmarkClaims(b *testing.B) {
	for _, nodes := range []int{1, 3} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			env := kubetest.Start(b)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			createTasks(b, ctx, env.Client, "bench", b.N)
			var conflicts, claimed atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for i := range nodes {
				c, err := ctrlclient.New(rest.CopyConfig(env.Config), ctrlclient.Options{Scheme: env.Scheme})
				if err != nil {
					b.Fatal(err)
				}
				cl := &kube.Claimer{Client: c, Node: fmt.Sprintf("node-%d", i)}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for claimed.Load() < int64(b.N) {
						var list kubeapi.TaskList
						if err := c.List(ctx, &list, ctrlclient.InNamespace("bench")); err != nil {
							b.Error(err)
							return
						}
						for j := range list.Items {
							out, err := cl.Claim(ctx, &list.Items[j], contractFor(cl.Node))
							if err != nil {
								b.Error(err)
								return
							}
							switch out {
							case kube.Claimed:
								claimed.Add(1)
							case kube.LostRace:
								conflicts.Add(1)
							}
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(conflicts.Load())/float64(b.N), "conflicts/task")
		})
	}
}
