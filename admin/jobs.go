package admin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"sync"
	"time"

	"github.com/txoutbox/outbox"
)

// A bulk action (retry or skip by filter) runs as a job on the server: the
// request waits up to Config.BulkWait for it and answers 200 with the
// result if it finished by then, else 202 with the job, whose progress
// GET /api/v1/jobs/{job_id} reports. A job changes each event in a
// transaction of its own, so it never holds a long transaction, and runs
// to the end whether or not anyone waits for it; Handler.Close stops it
// between two events.

// Job states.
const (
	jobRunning = "running"
	jobDone    = "done"
	jobFailed  = "failed"  // stopped on a database error
	jobStopped = "stopped" // stopped by Handler.Close
)

// How many finished jobs the handler remembers, and how long.
const (
	keepJobs   = 100
	keepJobFor = 24 * time.Hour
)

// bulkJob is one bulk action in progress or finished.
type bulkJob struct {
	id      string
	started time.Time
	done    chan struct{}

	mu       sync.Mutex
	res      actionResult
	state    string
	finished time.Time
}

// jobJSON is the API's view of a job.
type jobJSON struct {
	ID         string       `json:"job_id"`
	State      string       `json:"state"`
	URL        string       `json:"url"`
	StartedAt  time.Time    `json:"started_at"`
	FinishedAt *time.Time   `json:"finished_at,omitempty"`
	Result     actionResult `json:"result"`
}

func (j *bulkJob) snapshot() jobJSON {
	j.mu.Lock()
	defer j.mu.Unlock()
	res := j.res
	res.ByStatus = make(map[outbox.Status]int64, len(j.res.ByStatus))
	for k, v := range j.res.ByStatus {
		res.ByStatus[k] = v
	}
	if j.state == jobRunning {
		res.summarize()
	}
	return jobJSON{ID: j.id, State: j.state, URL: "/api/v1/jobs/" + j.id, StartedAt: j.started,
		FinishedAt: optTime(j.finished), Result: res}
}

// progress records the result so far.
func (j *bulkJob) progress(res *actionResult) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.res = *res
	j.res.ByStatus = make(map[outbox.Status]int64, len(res.ByStatus))
	for k, v := range res.ByStatus {
		j.res.ByStatus[k] = v
	}
}

// jobs are the handler's bulk jobs.
type jobs struct {
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu sync.Mutex
	m  map[string]*bulkJob
}

func newJobs() *jobs {
	ctx, cancel := context.WithCancel(context.Background())
	return &jobs{ctx: ctx, cancel: cancel, m: map[string]*bulkJob{}}
}

// start runs run in the background as a new job. run reports progress
// through the job and returns the final result.
func (js *jobs) start(run func(ctx context.Context, j *bulkJob) (actionResult, error), onErr func(*actionResult, error)) *bulkJob {
	var b [12]byte
	_, _ = rand.Read(b[:])
	j := &bulkJob{id: hex.EncodeToString(b[:]), started: time.Now().UTC(), done: make(chan struct{}), state: jobRunning}
	js.mu.Lock()
	js.forgetOld(j.started)
	js.m[j.id] = j
	js.mu.Unlock()
	js.wg.Add(1)
	go func() {
		defer js.wg.Done()
		defer close(j.done)
		res, err := run(js.ctx, j)
		state := jobDone
		if err != nil {
			state = jobFailed
			if js.ctx.Err() != nil {
				state = jobStopped
			}
			onErr(&res, err)
		}
		j.mu.Lock()
		j.res, j.state, j.finished = res, state, time.Now().UTC()
		j.mu.Unlock()
	}()
	return j
}

// forgetOld drops finished jobs older than keepJobFor and, past keepJobs
// of them, the oldest. js.mu is held.
func (js *jobs) forgetOld(now time.Time) {
	var finished []*bulkJob
	for id, j := range js.m {
		j.mu.Lock()
		state, fin := j.state, j.finished
		j.mu.Unlock()
		if state == jobRunning {
			continue
		}
		if now.Sub(fin) > keepJobFor {
			delete(js.m, id)
			continue
		}
		finished = append(finished, j)
	}
	for len(finished) >= keepJobs {
		oldest := 0
		for i, j := range finished {
			if j.started.Before(finished[oldest].started) {
				oldest = i
			}
		}
		delete(js.m, finished[oldest].id)
		finished = append(finished[:oldest], finished[oldest+1:]...)
	}
}

func (js *jobs) get(id string) (*bulkJob, bool) {
	js.mu.Lock()
	defer js.mu.Unlock()
	j, ok := js.m[id]
	return j, ok
}

// close stops the running jobs between two events and waits for them.
func (js *jobs) close() {
	js.cancel()
	js.wg.Wait()
}

// getJob answers GET /api/v1/jobs/{job_id}.
func (h *Handler) getJob(w http.ResponseWriter, r *http.Request, _ Identity) error {
	id := r.PathValue("job_id")
	j, ok := h.jobs.get(id)
	if !ok {
		return &apiError{http.StatusNotFound, "no bulk job " + id + " on this server (finished jobs are kept 24h, the last 100; a restart forgets them)"}
	}
	writeJSON(w, http.StatusOK, j.snapshot())
	return nil
}
