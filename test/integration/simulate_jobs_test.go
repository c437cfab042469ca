package integration_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/test/framework"
)

// TestSimulateJobSuccessPolicy (issue 40, group 1): the two conformance specs of test/e2e/apps/job.go
// (k8s.io/kubernetes v1.37.2) that once timed out on simulated Nodes only, "Job with successPolicy
// succeededIndexes rule should succeeded even when some indexes remain pending" and "... succeededCount
// rule ...", with their Jobs as e2ejob.NewTestJob("failOddSucceedEven", ...) builds them, run by the
// real kube-controller-manager's job controller on 3 simulated Nodes. Once SuccessCriteriaMet is set,
// the job controller deletes the pods still active and completes the Job (Complete, reason
// SuccessPolicy) only when none is terminating: each pod deleted must turn terminal and go.
func TestSimulateJobSuccessPolicy(t *testing.T) {
	t.Parallel()
	const (
		nodes  = 3
		prefix = "jobs-"
		ns     = "sim-jobs"
	)
	ctx := t.Context()
	dir := t.TempDir()
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cp := framework.StartTestControlPlane(sctx, t, framework.ControlPlaneOptions{
		Dir: filepath.Join(dir, "cp"), ControllerManager: true,
		ExtraControllerManagerArgs: []string{"--controllers=job,podgc,garbagecollector",
			"--allocate-node-cidrs=true", "--cluster-cidr=10.244.0.0/16", "--node-cidr-mask-size=24"},
	})
	if err := cp.StartScheduler(sctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.StopScheduler() })
	admin := cp.AdminClient
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	sim := startSimulator(t, "--kubeconfig="+cp.AdminKubeconfig, fmt.Sprintf("--nodes=%d", nodes), "--node-name-prefix="+prefix)
	waitNodesReady(ctx, t, admin, sim, nodes, 2*time.Minute)

	for _, tc := range []struct {
		name    string
		rule    batchv1.SuccessPolicyRule
		backoff int32
		// running: the pods run for ever (nodeagent.io/run-duration: 1h) until index 0's container is
		// stopped through the control API (exit 0); the job controller then deletes index 1's pod, still
		// running, whose container must not turn out to have succeeded.
		running bool
	}{
		// The two conformance specs as they are: index 1's command exits 1.
		{name: "succeeded-indexed", rule: batchv1.SuccessPolicyRule{SucceededIndexes: ptr.To("0")}, backoff: 6},
		{name: "succeeded-count", rule: batchv1.SuccessPolicyRule{SucceededCount: ptr.To[int32](1)}, backoff: math.MaxInt32},
		// Index 1 still running when the criteria are met: deleted by the job controller.
		{name: "deleted-running", rule: batchv1.SuccessPolicyRule{SucceededIndexes: ptr.To("0")}, backoff: 6, running: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := e2eTestJob("with-success-policy-"+tc.name, 2, 5, tc.backoff)
			job.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
			job.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{tc.rule}}
			selector := "batch.kubernetes.io/job-name=" + job.Name
			if tc.running {
				job.Spec.Template.Annotations = map[string]string{"nodeagent.io/run-duration": "1h"}
			}
			if _, err := admin.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			created := time.Now()
			if tc.running {
				var first string
				err := framework.WaitFor(ctx, 250*time.Millisecond, func() (bool, error) {
					pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
					if err != nil {
						return false, err
					}
					if time.Since(created) > time.Minute {
						return false, fmt.Errorf("indexes 0 and 1 not both running after a minute: %w", framework.ErrStop)
					}
					running := 0
					for _, p := range pods.Items {
						if p.Status.Phase == corev1.PodRunning {
							running++
							if p.Annotations[batchv1.JobCompletionIndexAnnotation] == "0" {
								first = p.Name
							}
						}
					}
					return running == 2 && first != "", nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if code, body, err := sim.postPath(ctx, "pods/"+ns+"/"+first, `{"container":"c","stop":true}`); err != nil || code != 200 {
					t.Fatalf("stopping index 0's container: %d %s %v", code, body, err)
				}
			}
			var j *batchv1.Job
			err := framework.WaitFor(ctx, 250*time.Millisecond, func() (bool, error) {
				var err error
				j, err = admin.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				if time.Since(created) > 90*time.Second {
					return false, fmt.Errorf("not Complete after 90 s: %w", framework.ErrStop)
				}
				for _, c := range j.Status.Conditions {
					if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
						return true, nil
					}
					if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
						return false, fmt.Errorf("job failed: %s: %w", c.Message, framework.ErrStop)
					}
				}
				return false, nil
			})
			pods, _ := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
			var b strings.Builder
			for _, p := range pods.Items {
				fmt.Fprintf(&b, "\n  %s index=%s node=%q phase=%s deletionTimestamp=%v finalizers=%v", p.Name,
					p.Annotations[batchv1.JobCompletionIndexAnnotation], p.Spec.NodeName, p.Status.Phase, p.DeletionTimestamp, p.Finalizers)
				for _, cs := range p.Status.ContainerStatuses {
					if tr := cs.State.Terminated; tr != nil {
						fmt.Fprintf(&b, " exit=%d reason=%s", tr.ExitCode, tr.Reason)
					}
				}
			}
			if err != nil {
				t.Fatalf("job %s: %v\nstatus %+v\npods:%s", job.Name, err, j.Status, b.String())
			}
			t.Logf("job %s Complete %v after its creation; pods:%s", job.Name, time.Since(created).Round(10*time.Millisecond), b.String())
			// What the conformance spec checks (WaitForJobComplete waits for status.succeeded to be 1).
			var complete *batchv1.JobCondition
			for i, c := range j.Status.Conditions {
				if c.Type == batchv1.JobComplete {
					complete = &j.Status.Conditions[i]
				}
			}
			if complete.Reason != batchv1.JobReasonSuccessPolicy {
				t.Errorf("Complete condition reason %q, want %q", complete.Reason, batchv1.JobReasonSuccessPolicy)
			}
			if j.Status.Succeeded != 1 || j.Status.CompletedIndexes != "0" {
				t.Errorf("job status succeeded %d completedIndexes %q, want 1 and \"0\" (index 1 fails or is deleted)", j.Status.Succeeded, j.Status.CompletedIndexes)
			}
			if j.Status.Active != 0 || ptr.Deref(j.Status.Ready, -1) != 0 || ptr.Deref(j.Status.Terminating, -1) != 0 {
				t.Errorf("job status active %d ready %v terminating %v, want 0 each", j.Status.Active, j.Status.Ready, j.Status.Terminating)
			}
		})
	}
}

// e2eTestJob is e2ejob.NewTestJob("failOddSucceedEven", name, Never, parallelism, completions, nil,
// backoffLimit) of k8s.io/kubernetes v1.37.2 test/e2e/framework/job/fixtures.go: its pod template, with
// the e2e's emptyDir volumes, busybox image and command.
func e2eTestJob(name string, parallelism, completions, backoffLimit int32) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{
			Parallelism: ptr.To(parallelism), Completions: ptr.To(completions), BackoffLimit: ptr.To(backoffLimit),
			ManualSelector: ptr.To(false),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"job": name}},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Volumes: []corev1.Volume{
						{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					},
					Containers: []corev1.Container{{
						Name: "c", Image: "registry.k8s.io/e2e-test-images/busybox:1.37.0-1",
						Command: []string{"sh", "-c"},
						Args: []string{`
			if [ $(expr ${JOB_COMPLETION_INDEX} % 2) -ne 0 ]; then
				exit 1
			else
				exit 0
			fi
			`},
						VolumeMounts: []corev1.VolumeMount{{MountPath: "/data", Name: "data"}},
					}},
				},
			},
		},
	}
}
