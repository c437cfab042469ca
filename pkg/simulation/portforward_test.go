package simulation

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/clock"
)

// forward runs st.PortForward of pod ns/p's port on one end of an in-memory connection and returns the
// other end, and a channel with PortForward's result.
func forward(t *testing.T, st *Streaming, port int32) (net.Conn, <-chan error) {
	t.Helper()
	client, stream := net.Pipe()
	errc := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { errc <- st.PortForward(ctx, "ns", "p", port, stream) }()
	t.Cleanup(func() { _ = client.Close() })
	return client, errc
}

// result waits for PortForward's result (10 s at most: a PortForward that dialed an echo server would
// wait for its client for ever).
func result(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(10 * time.Second):
		return errors.New("PortForward did not return within 10 s")
	}
}

// get sends a GET / on c and returns the response and its body.
func get(t *testing.T, c net.Conn, br *bufio.Reader) (*http.Response, string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

// TestPortForwardAnswers: each form of AnnotationPortForward's answer, and the default.
func TestPortForwardAnswers(t *testing.T) {
	for _, tc := range []struct {
		name       string
		annotation string
		port       int32
		status     int
		body       string
		header     [2]string
	}{
		{name: "no annotation: HTTP 200 naming the pod", port: 80, status: 200, body: "nodeagent simulate: pod ns/p port 80 (simulated)\n"},
		{name: "empty answer is the default", annotation: `{"80": {}}`, port: 80, status: 200, body: DefaultPortAnswerBody("ns", "p", 80)},
		{name: "port not named: the default", annotation: `{"8080": {"http": {"status": 503}}}`, port: 80, status: 200, body: DefaultPortAnswerBody("ns", "p", 80)},
		{name: "a port's own answer", annotation: `{"8080": {"http": {"status": 503, "body": "down\n", "headers": {"X-A": "b"}}}}`, port: 8080, status: 503, body: "down\n", header: [2]string{"X-A", "b"}},
		{name: "any port", annotation: `{"*": {"http": {"status": 404, "body": ""}}}`, port: 9, status: 404, body: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann := map[string]string{}
			if tc.annotation != "" {
				ann[AnnotationPortForward] = tc.annotation
			}
			st := &Streaming{Pods: onePod{logPod(ann)}, Clock: clock.RealClock{}}
			c, errc := forward(t, st, tc.port)
			br := bufio.NewReader(c)
			for range 2 { // keep-alive: a second request on the same connection
				resp, body := get(t, c, br)
				if resp.StatusCode != tc.status || body != tc.body {
					t.Errorf("answer %d %q, want %d %q", resp.StatusCode, body, tc.status, tc.body)
				}
				if tc.header[0] != "" && resp.Header.Get(tc.header[0]) != tc.header[1] {
					t.Errorf("header %s %q, want %q", tc.header[0], resp.Header.Get(tc.header[0]), tc.header[1])
				}
			}
			_ = c.Close()
			if err := result(t, errc); err != nil {
				t.Errorf("PortForward: %v", err)
			}
		})
	}
}

func TestPortForwardEchoAndRefuse(t *testing.T) {
	st := &Streaming{Pods: onePod{logPod(map[string]string{AnnotationPortForward: `{"7": {"echo": true}, "81": {"refuse": true}}`})}, Clock: clock.RealClock{}}
	c, errc := forward(t, st, 7)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "ping\n" {
		t.Errorf("echo: %q, %v", line, err)
	}
	_ = c.Close()
	if err := result(t, errc); err != nil {
		t.Errorf("echo: PortForward: %v", err)
	}
	_, errc = forward(t, st, 81)
	if err := result(t, errc); !errors.Is(err, ErrPortRefused) {
		t.Errorf("refuse: %v, want %v", err, ErrPortRefused)
	}
}

// TestPortForwardTenantCannotDial (issue 45, item 1): a pod's author, who may create pods and
// port-forward to them, cannot make the simulator dial an address: neither with the host:port form of
// earlier releases, nor an address where a target's name goes, nor a name the operator did not give.
// Only the operator's named target is dialed.
func TestPortForwardTenantCannotDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	addr := ln.Addr().String()
	for _, tc := range []struct {
		name, annotation string
		targets          map[string]string
		wantErr          string
	}{
		{"an address (earlier releases' form)", addr, nil, "want a JSON object"},
		{"port=address pairs (earlier releases' form)", "80=" + addr, nil, "want a JSON object"},
		{"an address as a target", `{"80": {"target": "` + addr + `"}}`, map[string]string{"db": addr}, "not one of this simulator's --port-forward-target names"},
		{"a name the operator did not give", `{"80": {"target": "etcd"}}`, map[string]string{"db": addr}, "not one of this simulator's --port-forward-target names"},
		{"two answers for one port", `{"80": {"target": "db", "echo": true}}`, map[string]string{"db": addr}, "give one of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &Streaming{Pods: onePod{logPod(map[string]string{AnnotationPortForward: tc.annotation})}, Clock: clock.RealClock{}, PortForwardTargets: tc.targets}
			_, errc := forward(t, st, 80)
			if err := result(t, errc); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("PortForward: %v, want an error containing %q", err, tc.wantErr)
			}
			if n := accepted.Load(); n != 0 {
				t.Fatalf("the simulator dialed %s %d times for a pod's annotation %q", addr, n, tc.annotation)
			}
		})
	}
	t.Run("the operator's target", func(t *testing.T) {
		st := &Streaming{Pods: onePod{logPod(map[string]string{AnnotationPortForward: `{"5432": {"target": "db"}}`})}, Clock: clock.RealClock{},
			PortForwardTargets: map[string]string{"db": addr}}
		c, errc := forward(t, st, 5432)
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "ping\n"); err != nil {
			t.Fatal(err)
		}
		if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "ping\n" {
			t.Errorf("through the target: %q, %v", line, err)
		}
		_ = c.Close()
		if err := result(t, errc); err != nil {
			t.Errorf("PortForward: %v", err)
		}
		if accepted.Load() != 1 {
			t.Errorf("the target was dialed %d times, want 1", accepted.Load())
		}
	})
}

func TestParsePortForwardTargets(t *testing.T) {
	for _, tc := range []struct {
		values  []string
		want    map[string]string
		wantErr string
	}{
		{values: nil, want: map[string]string{}},
		{values: []string{"db=127.0.0.1:5432", "web=web.example:80"}, want: map[string]string{"db": "127.0.0.1:5432", "web": "web.example:80"}},
		{values: []string{"db=[::1]:5432"}, want: map[string]string{"db": "[::1]:5432"}},
		{values: []string{"127.0.0.1:5432"}, wantErr: `--port-forward-target "127.0.0.1:5432": want NAME=host:port`},
		{values: []string{"Db=127.0.0.1:5432"}, wantErr: "lower-case DNS label"},
		{values: []string{"db=127.0.0.1"}, wantErr: "is not a host:port"},
		{values: []string{"db=:5432"}, wantErr: "is not a host:port"},
		{values: []string{"db=h:0"}, wantErr: "from 1 to 65535"},
		{values: []string{"db=h:1", "db=h:2"}, wantErr: `target "db" is named twice`},
	} {
		got, err := ParsePortForwardTargets(tc.values)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: %v, want an error containing %q", tc.values, err, tc.wantErr)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("%q: %v %v, want %v", tc.values, got, err, tc.want)
			continue
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%q: %s=%q, want %q", tc.values, k, got[k], v)
			}
		}
	}
}
