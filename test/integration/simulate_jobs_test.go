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
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/test/framework"
)

// The e2e job fixtures' commands (k8s.io/kubernetes v1.37.2 test/e2e/framework/job/fixtures.go).
const (
	e2eFailOddSucceedEven = `
			if [ $(expr ${JOB_COMPLETION_INDEX} % 2) -ne 0 ]; then
				exit 1
			else
				exit 0
			fi
			`
	e2eFailOnce = `
			if [[ -r /data/foo ]]
			then
				exit 0
			else
				touch /data/foo
				exit 1
			fi
		`
)

// TestSimulateJobs (issue 40): Job conformance specs of test/e2e/apps/job.go (k8s.io/kubernetes v1.37.2),
// their Jobs as e2ejob.NewTestJob builds them, run by the real kube-controller-manager's job controller
// on 3 simulated Nodes, each checked as the spec checks it. The containers' commands decide the outcome
// (the sandbox): failOddSucceedEven's odd indexes exit 1, failOnce fails once and leaves a marker file
// in its emptyDir (restartPolicy OnFailure: the restart succeeds) or in its Node's hostPath (a privileged
// pod: the API server allows privileged pods).
//
//   - group 1, "successPolicy succeededIndexes/succeededCount rule should succeeded even when some
//     indexes remain pending": they once timed out on simulated Nodes only, because every Job container
//     exited 0: WaitForJobComplete waits for status.succeeded to be 1, and indexes 0 and 1 both succeeded.
//     Also a pod still running when the criteria are met (index 0 stopped through the control API): the
//     job controller deletes it and completes once it has gone;
//   - "should run a job to completion when tasks sometimes fail and are locally restarted";
//   - "should allow to use the pod failure policy on exit code to fail the job early";
//   - "should execute all indexes despite some failing when using backoffLimitPerIndex".
//
// With --pod-command-interpretation=false (the old behaviour) all but the two that need no command
// fail: status.succeeded 2 and completedIndexes "0,1" for the success policies, Complete where Failed
// is expected for the other two.
func TestSimulateJobs(t *testing.T) {
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

	successPolicy := func(rule batchv1.SuccessPolicyRule, backoff int32) func(*batchv1.Job) {
		return func(j *batchv1.Job) {
			j.Spec.BackoffLimit = ptr.To(backoff)
			j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
			j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{rule}}
		}
	}
	for _, tc := range []struct {
		name              string
		script            string
		parallelism       int32
		completions       int32
		restartPolicy     corev1.RestartPolicy
		onNode            string // e2ejob.NewTestJobOnNode: a hostPath volume, privileged
		change            func(*batchv1.Job)
		running           bool // run-duration 1h; index 0's container stopped through the control API once both run
		wantCondition     batchv1.JobConditionType
		wantReason        string
		wantSucceeded     int32  // -1: not checked
		wantFailed        int32  // -1: not checked
		wantCompleted     string // status.completedIndexes, "-" not checked
		wantFailedIndexes string // status.failedIndexes, "-" not checked
	}{
		{name: "successPolicy succeededIndexes", script: e2eFailOddSucceedEven, parallelism: 2, completions: 5, restartPolicy: corev1.RestartPolicyNever,
			change:        successPolicy(batchv1.SuccessPolicyRule{SucceededIndexes: ptr.To("0")}, 6),
			wantCondition: batchv1.JobComplete, wantReason: batchv1.JobReasonSuccessPolicy, wantSucceeded: 1, wantFailed: -1, wantCompleted: "0", wantFailedIndexes: "-"},
		{name: "successPolicy succeededCount", script: e2eFailOddSucceedEven, parallelism: 2, completions: 5, restartPolicy: corev1.RestartPolicyNever,
			change:        successPolicy(batchv1.SuccessPolicyRule{SucceededCount: ptr.To[int32](1)}, math.MaxInt32),
			wantCondition: batchv1.JobComplete, wantReason: batchv1.JobReasonSuccessPolicy, wantSucceeded: 1, wantFailed: -1, wantCompleted: "0", wantFailedIndexes: "-"},
		{name: "successPolicy with a running pod deleted", script: e2eFailOddSucceedEven, parallelism: 2, completions: 5, restartPolicy: corev1.RestartPolicyNever,
			change: successPolicy(batchv1.SuccessPolicyRule{SucceededIndexes: ptr.To("0")}, 6), running: true,
			wantCondition: batchv1.JobComplete, wantReason: batchv1.JobReasonSuccessPolicy, wantSucceeded: 1, wantFailed: -1, wantCompleted: "0", wantFailedIndexes: "-"},
		{name: "failOnce locally restarted", script: e2eFailOnce, parallelism: 2, completions: 4, restartPolicy: corev1.RestartPolicyOnFailure,
			wantCondition: batchv1.JobComplete, wantReason: batchv1.JobReasonCompletionsReached, wantSucceeded: 4, wantFailed: 0, wantCompleted: "-", wantFailedIndexes: "-"},
		{name: "pod failure policy on exit code", script: e2eFailOnce, parallelism: 2, completions: 4, restartPolicy: corev1.RestartPolicyNever, onNode: prefix + "0001",
			change: func(j *batchv1.Job) {
				j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
					Action:      batchv1.PodFailurePolicyActionFailJob,
					OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{1}},
				}}}
			},
			wantCondition: batchv1.JobFailed, wantReason: batchv1.JobReasonPodFailurePolicy, wantSucceeded: -1, wantFailed: -1, wantCompleted: "-", wantFailedIndexes: "-"},
		{name: "backoffLimitPerIndex", script: e2eFailOddSucceedEven, parallelism: 2, completions: 4, restartPolicy: corev1.RestartPolicyNever,
			change: func(j *batchv1.Job) {
				j.Spec.BackoffLimit = nil
				j.Spec.BackoffLimitPerIndex = ptr.To[int32](1)
				j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
			},
			wantCondition: batchv1.JobFailed, wantReason: batchv1.JobReasonFailedIndexes, wantSucceeded: 2, wantFailed: 4, wantCompleted: "0,2", wantFailedIndexes: "1,3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.ReplaceAll(strings.ToLower(tc.name), " ", "-")
			job := e2eTestJob(name, tc.script, tc.restartPolicy, tc.parallelism, tc.completions, 6, tc.onNode)
			if tc.change != nil {
				tc.change(job)
			}
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
			var finished *batchv1.JobCondition
			err := framework.WaitFor(ctx, 250*time.Millisecond, func() (bool, error) {
				var err error
				j, err = admin.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				if time.Since(created) > 2*time.Minute {
					return false, fmt.Errorf("not finished after 2 minutes: %w", framework.ErrStop)
				}
				for i, c := range j.Status.Conditions {
					if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
						finished = &j.Status.Conditions[i]
						return true, nil
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
					fmt.Fprintf(&b, " restarts=%d", cs.RestartCount)
					if tr := cs.State.Terminated; tr != nil {
						fmt.Fprintf(&b, " exit=%d reason=%s", tr.ExitCode, tr.Reason)
					}
					if tr := cs.LastTerminationState.Terminated; tr != nil {
						fmt.Fprintf(&b, " last-exit=%d", tr.ExitCode)
					}
				}
			}
			if err != nil {
				t.Fatalf("job %s: %v\nstatus %+v\npods:%s", job.Name, err, j.Status, b.String())
			}
			t.Logf("job %s %s (%s) %v after its creation; pods:%s", job.Name, finished.Type, finished.Reason, time.Since(created).Round(10*time.Millisecond), b.String())
			if finished.Type != tc.wantCondition || finished.Reason != tc.wantReason {
				t.Errorf("job finished %s %s, want %s %s", finished.Type, finished.Reason, tc.wantCondition, tc.wantReason)
			}
			if tc.wantSucceeded >= 0 && j.Status.Succeeded != tc.wantSucceeded {
				t.Errorf("status.succeeded %d, want %d", j.Status.Succeeded, tc.wantSucceeded)
			}
			if tc.wantFailed >= 0 && j.Status.Failed != tc.wantFailed {
				t.Errorf("status.failed %d, want %d", j.Status.Failed, tc.wantFailed)
			}
			if tc.wantCompleted != "-" && j.Status.CompletedIndexes != tc.wantCompleted {
				t.Errorf("status.completedIndexes %q, want %q", j.Status.CompletedIndexes, tc.wantCompleted)
			}
			if tc.wantFailedIndexes != "-" && ptr.Deref(j.Status.FailedIndexes, "") != tc.wantFailedIndexes {
				t.Errorf("status.failedIndexes %q, want %q", ptr.Deref(j.Status.FailedIndexes, "<nil>"), tc.wantFailedIndexes)
			}
			if finished.Type == batchv1.JobComplete && (j.Status.Active != 0 || ptr.Deref(j.Status.Ready, -1) != 0 || ptr.Deref(j.Status.Terminating, -1) != 0) {
				t.Errorf("job status active %d ready %v terminating %v, want 0 each", j.Status.Active, j.Status.Ready, j.Status.Terminating)
			}
		})
	}
}

// e2eTestJob is e2ejob.NewTestJobOnNode(behavior, name, restartPolicy, parallelism, completions, nil,
// backoffLimit, nodeName) of k8s.io/kubernetes v1.37.2 test/e2e/framework/job/fixtures.go for the
// behaviours whose command is script: its pod template with the e2e's "data" volume (an emptyDir; with a
// node name, a hostPath directory on that Node and a privileged container), busybox image and command.
func e2eTestJob(name, script string, restartPolicy corev1.RestartPolicy, parallelism, completions, backoffLimit int32, nodeName string) *batchv1.Job {
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{
			Parallelism: ptr.To(parallelism), Completions: ptr.To(completions), BackoffLimit: ptr.To(backoffLimit),
			ManualSelector: ptr.To(false),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"job": name}},
				Spec: corev1.PodSpec{
					RestartPolicy: restartPolicy,
					Volumes: []corev1.Volume{
						{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					},
					Containers: []corev1.Container{{
						Name: "c", Image: "registry.k8s.io/e2e-test-images/busybox:1.37.0-1",
						Command:         []string{"/bin/sh", "-c"},
						Args:            []string{script},
						VolumeMounts:    []corev1.VolumeMount{{MountPath: "/data", Name: "data"}},
						SecurityContext: &corev1.SecurityContext{},
					}},
				},
			},
		},
	}
	if nodeName != "" {
		job.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": nodeName}
		dirType := corev1.HostPathDirectoryOrCreate
		job.Spec.Template.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/job-e2e/" + rand.String(10), Type: &dirType}}
		job.Spec.Template.Spec.Containers[0].SecurityContext.Privileged = ptr.To(true)
	}
	return job
}
