package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/metaplane/metaplane/backends/raft/catchup"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

func init() { Register(newRaftCmd) }

// Codes of the --json error object of the raft verbs (besides the admin
// API's codes).
const (
	codeNoQuorum = "NO_QUORUM" // fewer than a majority of the voters are reachable
	codeNoLeader = "NO_LEADER" // no member answers as leader
	// codeCannotStop: stopping the member now would leave no caught-up
	// majority (raft can-stop).
	codeCannotStop = "CANNOT_STOP"
)

// RaftFlags are what every `metaplane raft` verb shares.
type RaftFlags struct {
	bootstrap string
	json      bool
	timeout   time.Duration
	tls       *tlsFlags // --tls-*, --user, --password-file (tls.go)
}

func newRaftCmd() *cobra.Command {
	r := &RaftFlags{}
	cmd := &cobra.Command{
		Use:   "raft <verb>",
		Short: "operate the embedded Raft quorum (metaplane raft help)",
		Long: `The raft verbs ask the coordinators at --bootstrap-servers, every one of
them, for their Raft member's view (GetCoordinatorRaftStatus), which every
member answers without a quorum. With --json the answer is one JSON
object, and an error is one JSON object on stderr. Exit status: 0 success,
1 failure (no leader, no quorum, nothing answered, a change refused), 2 usage
error, 3 outcome unknown (a transfer or membership change at its deadline).
The offline verbs (bootstrap, snapshot restore, unsafe-recover) work on a
member's --data-dir with its coordinator stopped, reading the member's
settings from the configuration (--config, -D) as metaplane coordinator
does. See docs/raft.md, Operations.`,
	}
	markGroup(cmd, "verb")
	pf := cmd.PersistentFlags()
	pf.StringVar(&r.bootstrap, "bootstrap-servers", "127.0.0.1:9123", "the `host:port,...` of the coordinators to ask (list them all)")
	pf.BoolVar(&r.json, "json", false, "print the answer as JSON (and an error as JSON on stderr)")
	pf.DurationVar(&r.timeout, "timeout", 5*time.Second, "how long to wait for each coordinator's answer")
	r.tls = addTLSFlags(pf)
	cmd.AddCommand(raftStatus(r), raftLeader(r), raftCanStop(r), raftTransferLeader(r), raftAddVoter(r), raftRemoveVoter(r),
		raftSnapshot(r))
	addRegisteredVerbs(cmd, "raft", r)
	return cmd
}

// raftAnswer is one coordinator's answer (or why there is none).
type raftAnswer struct {
	addr string
	resp *adminv1.GetCoordinatorRaftStatusResponse
	err  error
}

// ask asks every address in addrs, in parallel, each bounded by --timeout.
func (r *RaftFlags) ask(ctx context.Context, addrs []string) []raftAnswer {
	out := make([]raftAnswer, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = raftAnswer{addr: addr}
			cc, err := r.tls.dial(addr)
			if err != nil {
				out[i].err = err
				return
			}
			defer cc.Close()
			cctx, cancel := context.WithTimeout(ctx, r.timeout)
			defer cancel()
			out[i].resp, err = adminv1.NewAdminServiceClient(cc).GetCoordinatorRaftStatus(cctx, &adminv1.GetCoordinatorRaftStatusRequest{})
			if err != nil {
				out[i].resp, out[i].err = nil, err
			}
		}()
	}
	wg.Wait()
	return out
}

// gather asks the bootstrap servers and, when none of them is the leader
// but an answer names the leader's address, the leader too.
func (r *RaftFlags) gather(ctx context.Context) ([]raftAnswer, error) {
	addrs := SplitList(r.bootstrap)
	for i, a := range addrs {
		addrs[i] = adminapi.HostPort(a)
	}
	if len(addrs) == 0 {
		return nil, UsageError("--bootstrap-servers: no coordinator address given")
	}
	answers := r.ask(ctx, addrs)
	if leaderAnswer(answers) == nil {
		asked := map[string]bool{}
		for _, a := range addrs {
			asked[a] = true
		}
		var more []string
		for _, a := range answers {
			if a.resp != nil && a.resp.LeaderAddress != "" && !asked[a.resp.LeaderAddress] {
				asked[a.resp.LeaderAddress] = true
				more = append(more, a.resp.LeaderAddress)
			}
		}
		answers = append(answers, r.ask(ctx, more)...)
	}
	var errs []string
	for _, a := range answers {
		if a.err == nil {
			return answers, nil
		}
		var ue *usageErr
		if errors.As(a.err, &ue) {
			return nil, a.err
		}
		if status.Code(a.err) == codes.Unimplemented {
			return nil, &WithCause{Cause: adminapi.FromStatus(a.err), Msg: fmt.Sprintf("%s: %s", a.addr, status.Convert(a.err).Message())}
		}
		errs = append(errs, fmt.Sprintf("%s: %s", a.addr, status.Convert(a.err).Message()))
	}
	return nil, &WithCause{Cause: adminapi.FromStatus(answers[0].err),
		Msg: "no coordinator answered (is one running? start one with `metaplane coordinator`): " + strings.Join(errs, "; ")}
}

// leaderAnswer is the answer of a member that answers as the Raft leader,
// the highest term's when several do (an old leader that has not noticed
// yet); nil when none does.
func leaderAnswer(answers []raftAnswer) *raftAnswer {
	var best *raftAnswer
	for i := range answers {
		a := &answers[i]
		if a.resp != nil && a.resp.View == adminv1.RaftStatusView_RAFT_STATUS_VIEW_LEADER &&
			(best == nil || a.resp.Term > best.resp.Term) {
			best = a
		}
	}
	return best
}

// raftRow is one member in the status table and its --json form.
type raftRow struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	// Coordinator is the client address the member's coordinator answered
	// at, empty when it did not answer.
	Coordinator string `json:"coordinator"`
	Role        string `json:"role"`
	Kind        string `json:"kind"`
	Leader      bool   `json:"leader"`
	Reachable   bool   `json:"reachable"`
	// Term, Commit and Applied are the member's own (-1 when it did not
	// answer); Applied falls back to the index the viewer knows.
	Term          int64 `json:"term"`
	Commit        int64 `json:"commit_index"`
	Applied       int64 `json:"applied_index"`
	Lag           int64 `json:"lag"`
	SnapshotIndex int64 `json:"snapshot_index"`
	// LastContactAgeMs is how long ago the viewer last had contact, -1 for
	// never.
	LastContactAgeMs int64 `json:"last_contact_age_ms"`
	// CaughtUp: in the leader's view, the member is the leader, or
	// reachable with a recent progress report at most catchup.MaxRemovalLag
	// entries behind (a reachable witness too); false without a leader's
	// view.
	CaughtUp bool `json:"caught_up"`
	// behind says, in the leader's view, how a member not caught up falls
	// short ("no progress report yet").
	behind string
}

// raftReport is `raft status`'s answer.
type raftReport struct {
	// View is LEADER when the table is the leader's view, LOCAL when no
	// member answered as leader and the table joins the members' own views.
	View    string `json:"view"`
	Healthy bool   `json:"healthy"`
	// Problem says why the quorum is not healthy; empty when it is.
	Problem         string `json:"problem"`
	ClusterID       string `json:"cluster_id"`
	LeaderID        string `json:"leader_id"`
	LeaderAddress   string `json:"leader_address"`
	Term            int64  `json:"term"`
	Voters          int    `json:"voters"`
	VotersReachable int    `json:"voters_reachable"`
	// VotersCaughtUp counts the voters (and witnesses) caught up in the
	// leader's view (0 without one); FailureTolerance is how many of them
	// may fail, or be stopped, with a caught-up majority of the voters
	// left: VotersCaughtUp minus the majority, at least 0.
	VotersCaughtUp   int       `json:"voters_caught_up"`
	FailureTolerance int       `json:"failure_tolerance"`
	Members          []raftRow `json:"members"`
	// Answers are the coordinators' answers as the API gives them (or the
	// error of each that did not answer).
	Answers []json.RawMessage `json:"answers"`
	code    string
}

// buildReport joins the answers into one report.
func buildReport(answers []raftAnswer) *raftReport {
	rep := &raftReport{}
	own := map[string]*raftAnswer{} // member id -> its own answer
	for i := range answers {
		a := &answers[i]
		var raw []byte
		if a.resp != nil {
			raw, _ = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(a.resp)
			raw = []byte(fmt.Sprintf(`{"coordinator":%q,"status":%s}`, a.addr, raw))
			if _, dup := own[a.resp.MemberId]; !dup {
				own[a.resp.MemberId] = a
			}
		} else {
			b, _ := json.Marshal(map[string]string{"coordinator": a.addr, "error": status.Convert(a.err).Message()})
			raw = b
		}
		rep.Answers = append(rep.Answers, raw)
	}
	la := leaderAnswer(answers)
	// fill takes a member's term, indexes and snapshot from its own answer
	// and, with a leader, its lag behind the leader's commit index.
	fill := func(row *raftRow) {
		row.Term, row.Commit = -1, -1
		if a, ok := own[row.ID]; ok {
			row.Coordinator = a.addr
			row.Term, row.Commit, row.Applied = a.resp.Term, a.resp.CommitIndex, a.resp.AppliedIndex
			row.SnapshotIndex = a.resp.SnapshotIndex
			if la != nil {
				row.Lag = max(la.resp.CommitIndex-a.resp.AppliedIndex, 0)
			}
		}
	}
	if la != nil {
		l := la.resp
		rep.View, rep.ClusterID, rep.LeaderID, rep.LeaderAddress, rep.Term = "LEADER", l.ClusterId, l.MemberId, la.addr, l.Term
		for _, m := range l.Members {
			row := raftRow{ID: m.Id, Address: m.Address, Role: m.Role, Kind: m.Kind, Leader: m.Id == l.MemberId,
				Reachable: m.Reachable, Applied: m.MatchIndex, Lag: m.Lag, LastContactAgeMs: m.LastContactAgeMs,
				CaughtUp: caughtUp(l, m, catchup.MaxRemovalLag)}
			if !row.CaughtUp {
				row.behind = behindText(m, catchup.MaxRemovalLag)
			}
			fill(&row)
			if m.Id == l.MemberId {
				row.LastContactAgeMs = 0
			}
			rep.Members = append(rep.Members, row)
		}
	} else {
		// No leader answered: each member that answered is reachable and
		// speaks for itself; the others are as the answering members last
		// knew them, and unreachable from here.
		rep.View = "LOCAL"
		seen := map[string]int{}
		for _, a := range answers {
			if a.resp == nil {
				continue
			}
			if rep.ClusterID == "" {
				rep.ClusterID = a.resp.ClusterId
			}
			rep.Term = max(rep.Term, a.resp.Term)
			for _, m := range a.resp.Members {
				i, ok := seen[m.Id]
				if !ok {
					i = len(rep.Members)
					seen[m.Id] = i
					rep.Members = append(rep.Members, raftRow{ID: m.Id, Address: m.Address, Kind: m.Kind,
						Role: "unknown", Applied: m.MatchIndex, Lag: m.Lag, LastContactAgeMs: m.LastContactAgeMs})
				}
				row := &rep.Members[i]
				if m.Id == a.resp.MemberId {
					row.Role, row.Reachable, row.LastContactAgeMs = m.Role, true, 0
					row.Applied, row.Lag = m.MatchIndex, m.Lag
				} else if !row.Reachable && m.LastContactAgeMs >= 0 &&
					(row.LastContactAgeMs < 0 || m.LastContactAgeMs < row.LastContactAgeMs) {
					row.LastContactAgeMs = m.LastContactAgeMs
				}
			}
		}
		for i := range rep.Members {
			fill(&rep.Members[i])
		}
		sort.Slice(rep.Members, func(i, j int) bool { return idLess(rep.Members[i].ID, rep.Members[j].ID) })
	}
	for _, m := range rep.Members {
		if m.Kind == "voter" || m.Kind == "witness" {
			rep.Voters++
			if m.Reachable {
				rep.VotersReachable++
			}
			if m.CaughtUp {
				rep.VotersCaughtUp++
			}
		}
	}
	quorum := rep.Voters/2 + 1
	rep.FailureTolerance = max(rep.VotersCaughtUp-quorum, 0)
	switch {
	case rep.Voters > 0 && rep.VotersReachable < quorum:
		var cut []string
		for _, m := range rep.Members {
			if (m.Kind == "voter" || m.Kind == "witness") && !m.Reachable {
				cut = append(cut, m.ID)
			}
		}
		rep.Problem = fmt.Sprintf("%d of %d voters unreachable: no quorum (unreachable: %s)", rep.Voters-rep.VotersReachable, rep.Voters, strings.Join(cut, ", "))
		rep.code = codeNoQuorum
	case rep.View != "LEADER":
		rep.Problem = fmt.Sprintf("no leader reachable: %d of %d voters answer and none is the leader (an election may be in progress, or the leader's coordinator is not in --bootstrap-servers)",
			rep.VotersReachable, rep.Voters)
		rep.code = codeNoLeader
	default:
		rep.Healthy = true
	}
	return rep
}

// idLess orders replica ids numerically where they are numbers.
func idLess(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	if errA == nil && errB == nil {
		return x < y
	}
	return a < b
}

func (rep *raftReport) text(w io.Writer) {
	fmt.Fprintf(w, "cluster %s, term %d, ", OrNone(rep.ClusterID), rep.Term)
	if rep.View == "LEADER" {
		fmt.Fprintf(w, "leader %s at %s (the leader's view)\n", rep.LeaderID, rep.LeaderAddress)
	} else {
		fmt.Fprintf(w, "no leader answered (each member's own view)\n")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDRESS\tROLE\tKIND\tTERM\tCOMMIT\tAPPLIED\tLAG\tLAST CONTACT\tREACHABLE")
	for _, m := range rep.Members {
		id := m.ID
		if m.Leader {
			id += "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", id, m.Address, m.Role, m.Kind,
			dashIfNeg(m.Term), dashIfNeg(m.Commit), m.Applied, m.Lag, age(m.LastContactAgeMs), yesNo(m.Reachable))
	}
	tw.Flush()
	if rep.Healthy {
		fmt.Fprintf(w, "%d of %d voters reachable: quorum held; %d caught up, %d needed: %s\n", rep.VotersReachable, rep.Voters,
			rep.VotersCaughtUp, rep.Voters/2+1, toleranceText(rep.FailureTolerance))
	}
}

// toleranceText says how many voters may fail with a caught-up majority
// left.
func toleranceText(n int) string {
	switch n {
	case 0:
		return "no voter may fail (or be stopped) without losing a caught-up majority"
	case 1:
		return "1 voter may fail (or be stopped) with a caught-up majority left"
	}
	return fmt.Sprintf("%d voters may fail (or be stopped) with a caught-up majority left", n)
}

func OrNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func dashIfNeg(v int64) string {
	if v < 0 {
		return "-"
	}
	return strconv.FormatInt(v, 10)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func age(ms int64) string {
	switch {
	case ms < 0:
		return "never"
	case ms == 0:
		return "now"
	default:
		return (time.Duration(ms) * time.Millisecond).Round(time.Millisecond).String() + " ago"
	}
}

// JSON reports whether --json was given.
func (r *RaftFlags) JSON() bool { return r.json }

// PrintJSON prints v as the verb's --json answer.
func (r *RaftFlags) PrintJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func raftStatus(r *RaftFlags) *cobra.Command {
	var (
		watch    bool
		interval time.Duration
		count    int
	)
	cmd := &cobra.Command{Use: "status", Args: NoArgs,
		Short: "show the quorum: every member, its role, term, indexes, lag and last contact; exit 1 without a leader or a quorum"}
	f := cmd.Flags()
	f.BoolVar(&watch, "watch", false, "repeat every --interval until interrupted (or --count rounds)")
	interval = 2 * time.Second
	f.Var((*millisDuration)(&interval), "interval", "the pause between rounds of --watch, `D`: a duration (2s, 500ms) or a bare number of milliseconds (500)")
	f.IntVar(&count, "count", 0, "with --watch, stop after this many rounds (0: until interrupted)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if interval <= 0 {
			return UsageError("--interval: want a positive duration, got %v", interval)
		}
		if count < 0 || (count > 0 && !watch) {
			return UsageError("--count: want a positive number of rounds, with --watch")
		}
		for round := 1; ; round++ {
			err := r.statusOnce(cmd)
			if !watch || (count > 0 && round >= count) {
				return err
			}
			if err != nil {
				reportError(cmd.ErrOrStderr(), cmd, err, r.json)
			}
			select {
			case <-cmd.Context().Done():
				return nil
			case <-time.After(interval):
			}
			if !r.json {
				fmt.Fprintln(cmd.OutOrStdout())
			}
		}
	}
	return cmd
}

// millisDuration is a duration flag that also takes a bare number as
// milliseconds ("500" is 500ms), as the design documents write intervals.
type millisDuration time.Duration

func (d *millisDuration) String() string { return time.Duration(*d).String() }
func (d *millisDuration) Type() string   { return "duration" }

func (d *millisDuration) Set(s string) error {
	s = strings.TrimSpace(s)
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		if ms > int64(math.MaxInt64/time.Millisecond) || ms < int64(math.MinInt64/time.Millisecond) {
			return fmt.Errorf("%s milliseconds is out of range", s)
		}
		*d = millisDuration(time.Duration(ms) * time.Millisecond)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is neither a duration (2s, 500ms) nor a number of milliseconds", s)
	}
	*d = millisDuration(v)
	return nil
}

func (r *RaftFlags) statusOnce(cmd *cobra.Command) error {
	answers, err := r.gather(cmd.Context())
	if err != nil {
		return err
	}
	rep := buildReport(answers)
	w := cmd.OutOrStdout()
	if r.json {
		if err := r.PrintJSON(w, rep); err != nil {
			return err
		}
	} else {
		rep.text(w)
	}
	if !rep.Healthy {
		return &CodedErr{Err: errors.New(rep.Problem), Code: rep.code}
	}
	return nil
}

// leaderReport is `raft leader`'s answer.
type leaderReport struct {
	// LeaderID is the leader's replica id; Address its coordinator's
	// client address; RaftAddress its Raft address.
	LeaderID    string `json:"leader_id"`
	Address     string `json:"address"`
	RaftAddress string `json:"raft_address"`
	Term        int64  `json:"term"`
	// Agreeing is how many of the Answering members name this leader at
	// this term (the leader included).
	Agreeing  int `json:"agreeing"`
	Answering int `json:"answering"`
}

func raftLeader(r *RaftFlags) *cobra.Command {
	return &cobra.Command{Use: "leader", Args: NoArgs,
		Short: "show the Raft leader, verified: the member that answers as leader; exit 1 when none does",
		RunE: func(cmd *cobra.Command, _ []string) error {
			answers, err := r.gather(cmd.Context())
			if err != nil {
				return err
			}
			rep := leaderReport{}
			for _, a := range answers {
				if a.resp != nil {
					rep.Answering++
				}
			}
			la := leaderAnswer(answers)
			if la == nil {
				named := map[string]bool{}
				for _, a := range answers {
					if a.resp != nil && a.resp.LeaderId != "" {
						named[a.resp.LeaderId] = true
					}
				}
				msg := fmt.Sprintf("leader unknown: none of the %d answering members answers as leader", rep.Answering)
				if len(named) > 0 {
					ids := make([]string, 0, len(named))
					for id := range named {
						ids = append(ids, id)
					}
					sort.Strings(ids)
					msg += fmt.Sprintf(" (they last knew %s, which did not answer as leader)", strings.Join(ids, ", "))
				}
				return &CodedErr{Err: errors.New(msg), Code: codeNoLeader}
			}
			l := la.resp
			rep.LeaderID, rep.Address, rep.Term = l.MemberId, la.addr, l.Term
			for _, m := range l.Members {
				if m.Id == l.MemberId {
					rep.RaftAddress = m.Address
				}
			}
			for _, a := range answers {
				if a.resp != nil && a.resp.LeaderId == l.MemberId && a.resp.Term == l.Term {
					rep.Agreeing++
				}
			}
			if r.json {
				return r.PrintJSON(cmd.OutOrStdout(), rep)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "leader %s at %s (raft %s), term %d; %d of %d answering members agree\n",
				rep.LeaderID, rep.Address, rep.RaftAddress, rep.Term, rep.Agreeing, rep.Answering)
			return nil
		}}
}

// transferReport is `raft transfer-leader`'s answer.
type transferReport struct {
	PreviousLeaderID string `json:"previous_leader_id"`
	LeaderID         string `json:"leader_id"`
	// Address is the new leader's coordinator client address, as it
	// answered raft status as leader.
	Address string `json:"address"`
	Term    int64  `json:"term"`
}

func raftTransferLeader(r *RaftFlags) *cobra.Command {
	var to string
	var wait time.Duration
	cmd := &cobra.Command{Use: "transfer-leader", Args: NoArgs,
		Short: "hand the Raft leadership to --to N (default: the most caught-up voter) and report the new leader and epoch"}
	f := cmd.Flags()
	f.StringVar(&to, "to", "", "the `id` of the voter to lead (default: the most caught-up other voter)")
	f.DurationVar(&wait, "wait", 30*time.Second, "how long to wait for the target to catch up, for the transfer and for the new leader to answer as leader")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if to != "" {
			if n, err := strconv.ParseUint(to, 10, 64); err != nil || n == 0 {
				return UsageError("--to: want a voter's id (a positive integer), got %q", to)
			}
		}
		if wait <= 0 {
			return UsageError("--wait: want a positive duration, got %v", wait)
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), wait)
		defer cancel()
		// A voter that has not reported its progress to the leader yet
		// (a cluster or a leader of a moment ago) is waited for.
		var resp *adminv1.TransferRaftLeadershipResponse
		err := r.retryWhileCatchingUp(ctx, cmd.ErrOrStderr(), wait, func() error {
			return r.callAdmin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
				var err error
				resp, err = a.TransferRaftLeadership(ctx, &adminv1.TransferRaftLeadershipRequest{ToId: to})
				return err
			})
		}, func(st *adminv1.GetCoordinatorRaftStatusResponse) string { return transferBehind(st, to) })
		if err != nil {
			return err
		}
		// Verify: the new leader answers as leader at (at least) the term
		// the transfer reported.
		rep := transferReport{PreviousLeaderID: resp.PreviousLeaderId, LeaderID: resp.LeaderId, Term: resp.Term}
		for {
			answers, _ := r.gather(ctx)
			if la := leaderAnswer(answers); la != nil && la.resp.MemberId == resp.LeaderId && la.resp.Term >= resp.Term {
				rep.Address, rep.Term = la.addr, la.resp.Term
				break
			}
			select {
			case <-ctx.Done():
				return &CodedErr{Code: codeNoLeader, Err: fmt.Errorf(
					"the transfer to %s completed at term %d, but it did not answer as leader within --wait %v (is its coordinator in --bootstrap-servers?)",
					resp.LeaderId, resp.Term, wait)}
			case <-time.After(100 * time.Millisecond):
			}
		}
		if r.json {
			return r.PrintJSON(cmd.OutOrStdout(), rep)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "leadership moved from %s to %s at %s, term (epoch) %d\n",
			OrNone(rep.PreviousLeaderID), rep.LeaderID, rep.Address, rep.Term)
		return nil
	}
	return cmd
}
