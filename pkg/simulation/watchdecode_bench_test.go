package simulation

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	restclientwatch "k8s.io/client-go/rest/watch"
)

// BenchmarkPodWatchDecode measures client-go's own decoding of a pod watch stream, the part of a pod
// start the CPU profiles of bench-pods name "the watch's decoding": a stream of MODIFIED events of
// the fixture pod (testdata/deployment-pod.json, managedFields and the status nodeagent writes),
// framed and decoded as the informer's watch does (rest.Request's StreamDecoder, streaming.Decoder,
// rest/watch.Decoder), in protobuf (what nodeagent's clients ask for) and JSON (client-go's
// default), with and without the informer's transform (trimPod) after it. Per event: ns, B, allocs.
// go test -run '^$' -bench PodWatchDecode -benchmem ./pkg/simulation
func BenchmarkPodWatchDecode(b *testing.B) {
	data, err := os.ReadFile("testdata/deployment-pod.json")
	if err != nil {
		b.Fatal(err)
	}
	var p v1.Pod
	if err := json.Unmarshal(data, &p); err != nil {
		b.Fatal(err)
	}
	p.Spec.NodeName = NodeName("sim-node-", 0)
	neg := runtime.NewClientNegotiator(scheme.Codecs.WithoutConversion(), v1.SchemeGroupVersion)
	for _, ct := range []string{"application/vnd.kubernetes.protobuf", "application/json"} {
		for _, trim := range []bool{false, true} {
			name := map[string]string{"application/vnd.kubernetes.protobuf": "protobuf", "application/json": "json"}[ct]
			if trim {
				name += "+transform"
			}
			b.Run(name, func(b *testing.B) {
				stream := encodeWatchStream(b, neg, ct, &p, 1000)
				objDec, streamSer, framer, err := neg.StreamDecoder(ct, nil)
				if err != nil {
					b.Fatal(err)
				}
				transform := trimPod("sim-node-", Shard{Index: 0, Count: 1}, 1, false)
				b.ReportAllocs()
				b.SetBytes(int64(len(stream) / 1000))
				n := 0
				var d *restclientwatch.Decoder
				for b.Loop() {
					if n%1000 == 0 {
						d = restclientwatch.NewDecoder(streaming.NewDecoder(framer.NewFrameReader(io.NopCloser(bytes.NewReader(stream))), streamSer), objDec)
					}
					typ, obj, err := d.Decode()
					if err != nil || typ != watch.Modified {
						b.Fatalf("event %d: %v %v", n, typ, err)
					}
					if trim {
						if _, err := transform(obj); err != nil {
							b.Fatal(err)
						}
					}
					n++
				}
			})
		}
	}
}

// encodeWatchStream returns n MODIFIED events of p as the API server writes a watch in content type ct.
func encodeWatchStream(b *testing.B, neg runtime.ClientNegotiator, ct string, p *v1.Pod, n int) []byte {
	b.Helper()
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), ct)
	if !ok || info.StreamSerializer == nil {
		b.Fatalf("no stream serializer for %s", ct)
	}
	enc := scheme.Codecs.EncoderForVersion(info.Serializer, v1.SchemeGroupVersion)
	var buf bytes.Buffer
	fw := info.StreamSerializer.Framer.NewFrameWriter(&buf)
	evEnc := streaming.NewEncoder(fw, info.StreamSerializer.Serializer)
	for range n {
		var raw bytes.Buffer
		if err := enc.Encode(p, &raw); err != nil {
			b.Fatal(err)
		}
		ev := &metav1.WatchEvent{Type: string(watch.Modified), Object: runtime.RawExtension{Raw: raw.Bytes()}}
		if err := evEnc.Encode(ev); err != nil {
			b.Fatal(err)
		}
	}
	return buf.Bytes()
}
