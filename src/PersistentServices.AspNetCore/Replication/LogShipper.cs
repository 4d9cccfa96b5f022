using System.Buffers;
using System.Globalization;
using System.Net;
using System.Net.Http.Headers;
using System.Net.Http.Json;
using Microsoft.Extensions.Logging;
using PersistentServices.Log;

namespace PersistentServices.Replication;

/// <summary>
/// Ships a primary's committed log to one replica (docs/replication.md): first asks where the replica stands and decides
/// how it catches up ([Replicated FS]: partial recovery, the missing suffix, when the replica's last bytes are this log's,
/// or once it is cut back to where this log's next term began when it holds an older primary's tail past there; total
/// recovery, the whole log from its begin, when it holds nothing, is behind the begin, or holds an older primary's history
/// that cannot be cut back); then sends every new commit as it becomes durable here, in pieces that end at commit records, and reports
/// each acknowledged end to the <see cref="ReplicationWatermark"/>, which releases the durable waits it holds. One request
/// in flight at a time; whatever committed meanwhile goes in the next one (a group commit of shipments).
/// </summary>
internal sealed class LogShipper : IDisposable
{
    private readonly ReplicationNode _node;
    private readonly int _index;
    private readonly Uri _replica;
    private readonly Uri _append;
    private readonly DurableLog _log;
    private readonly ReplicationWatermark _watermark;
    private readonly LogOptions _logOptions;
    private readonly HttpClient _http;
    private readonly ReplicationOptions _options;
    private readonly ILogger _logger;
    private readonly SemaphoreSlim _wake = new(0, 1);
    private long _shippedUntil = -1;
    private long _shipments;
    private long _bytes;
    private long _partial;
    private long _cut;
    private long _total;
    private long _replicaTerm;
    private volatile string _state = "connecting";

    /// <summary>How far behind the replica is in time (<see cref="LagTime"/>), from the local commits it does not hold yet.</summary>
    private readonly ReplicaLag _lag;

    public LogShipper(ReplicationNode node, int index, Uri replica, DurableLog log, ReplicationWatermark watermark, LogOptions logOptions, HttpClient http,
        ReplicationOptions options, ILogger logger, TimeProvider time)
    {
        _lag = new ReplicaLag(time);
        _lag.LocallyDurable(Math.Max(log.LocalDurableUntil, watermark.LocalUntil));
        _node = node;
        _index = index;
        _replica = replica;
        _append = new Uri(replica, ReplicationEndpoints.AppendPath);
        _log = log;
        _watermark = watermark;
        _logOptions = logOptions;
        _http = http;
        _options = options;
        _logger = logger;
        watermark.LocalAdvanced += Wake;
        watermark.LocalAdvanced += Sample;
    }

    /// <summary>The replica's address.</summary>
    public Uri Replica => _replica;

    /// <summary>What the replica holds durably as far as this primary knows (-1 before it answered).</summary>
    public long ShippedUntil => Volatile.Read(ref _shippedUntil);

    /// <summary>Shipments acknowledged, and their bytes.</summary>
    public (long Shipments, long Bytes) Shipped => (Interlocked.Read(ref _shipments), Interlocked.Read(ref _bytes));

    /// <summary>How the replica caught up at each handshake so far: from its end, after a cut back, from this log's begin (a reset).</summary>
    public (long Partial, long Cut, long Total) CatchUps => (Interlocked.Read(ref _partial), Interlocked.Read(ref _cut), Interlocked.Read(ref _total));

    /// <summary>What the shipper is doing (connecting, catching up, streaming, unreachable, fenced, refused).</summary>
    public string State => _state;

    /// <summary>The term the replica answered in last (0 before it answered): above this primary's, it refuses its shipments.</summary>
    public long ReplicaTerm => Interlocked.Read(ref _replicaTerm);

    /// <summary>Whether the replica answers (and takes) its shipments now.</summary>
    public bool Reachable => _state is "streaming" || _state.StartsWith("catching up", StringComparison.Ordinal);

    /// <summary>Whether the replica's port refused the last connection (no process listens there: stopped, or stopping); false once it answers.</summary>
    public bool RefusesConnections
    {
        get => Volatile.Read(ref _refusesConnections);
        private set => Volatile.Write(ref _refusesConnections, value);
    }

    private bool _refusesConnections;

    /// <summary>Bytes of this log's durable end the replica does not hold yet, as far as this primary knows.</summary>
    public long LagBytes => Math.Max(0, _watermark.LocalUntil - Math.Max(0, ShippedUntil));

    /// <summary>
    /// How long ago the oldest record this log holds durably and the replica (as far as this primary knows) does not became
    /// durable here: zero when it holds everything. What <see cref="ReplicationHealth"/> compares to
    /// <see cref="ReplicationOptions.MaxHealthyLag"/>.
    /// </summary>
    public TimeSpan LagTime => _lag.Lag;

    public async Task RunAsync(CancellationToken cancellationToken)
    {
        using var reader = new CommittedLogReader(_log.Directory, _log.SegmentSizeBits);
        var unreachable = false;
        while (!cancellationToken.IsCancellationRequested && _watermark.Fault is null)
        {
            try
            {
                var (from, reset) = await HandshakeAsync(reader, cancellationToken).ConfigureAwait(false);
                if (from < 0)
                {
                    if (_node.Role != ReplicationRole.Primary || _watermark.Fault is not null)
                    {
                        return; // fenced or refused: nothing more to ship from here
                    }

                    // Still the primary: it hands over, and the fence by the target's term waits for the switchover's outcome
                    // (ReplicationNode.Fence). Ask again: if the switchover failed, the next answer fences it.
                    await Task.Delay(_options.RetryInterval, cancellationToken).ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
                    continue;
                }

                if (unreachable)
                {
                    ReplicationServiceEvents.ReplicaReachable(_logger, _replica.ToString(), from);
                    unreachable = false;
                }

                await StreamAsync(reader, from, reset, cancellationToken).ConfigureAwait(false);
            }
            catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
            {
                return;
            }
            catch (Exception ex) when (!cancellationToken.IsCancellationRequested)
            {
                // Out of reach, an answer that is not one, or anything else: never a shipper that stops for good (a
                // synchronous primary would then acknowledge nothing more); logged once until the replica answers again.
                if (!unreachable)
                {
                    ReplicationServiceEvents.ReplicaUnreachable(_logger, _replica.ToString(), ex.Message);
                    unreachable = true;
                }

                _state = "unreachable";
                RefusesConnections = ex is HttpRequestException { InnerException: System.Net.Sockets.SocketException { SocketErrorCode: System.Net.Sockets.SocketError.ConnectionRefused } };
                await Task.Delay(_options.RetryInterval, cancellationToken).ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
            }
        }
    }

    /// <summary>
    /// Asks where the replica stands; returns where shipping starts and whether that is a reset (total recovery), or -1
    /// when this primary must not ship (fenced, or its log is not the newest of its group).
    /// </summary>
    private async Task<(long From, bool Reset)> HandshakeAsync(CommittedLogReader reader, CancellationToken cancellationToken)
    {
        var begin = _log.BeginAddress;
        var answer = await SendAsync(new Shipment(_node.Term, -1, begin, 0, false, ReadOnlyMemory<byte>.Empty), cancellationToken).ConfigureAwait(false);
        switch (answer.Outcome)
        {
            case ShipmentOutcome.Fenced:
                _state = "fenced";
                _node.Fence(answer.Term, $"replica {_replica} has taken it");
                return (-1, false);
            case ShipmentOutcome.Empty:
                _state = "catching up (total)";
                Interlocked.Increment(ref _total);
                return (begin, true);
            case ShipmentOutcome.Denied:
                // Only a promotion's claim is denied, and this probe names no candidate: not an answer to this message.
                throw new ReplicationProtocolException($"{_replica} answered this primary's probe as a refused promotion's claim (denied)");
        }

        var end = _log.LocalDurableUntil;
        var tail = answer.DurableUntil < begin ? TailComparison.BelowBegin
            : answer.DurableUntil <= end ? CompareTail(reader, answer, begin) : TailComparison.Ahead;
        var cut = tail is TailComparison.Different or TailComparison.Ahead ? CutPoint(_node.History, answer, begin, end) : null;
        switch (Decide(answer, tail, _node.Term, _node.LogWasNew, cut))
        {
            case CatchUp.Partial:
                RefusesConnections = false;
                _state = answer.DurableUntil < end ? "catching up (partial)" : "streaming";
                Interlocked.Increment(ref _partial);
                return (answer.DurableUntil, false);
            case CatchUp.Cut:
                return await CutBackAsync(reader, answer, cut!.Value, begin, cancellationToken).ConfigureAwait(false);
            case CatchUp.Total:
                _state = "catching up (total)";
                Interlocked.Increment(ref _total);
                return (begin, true);
            default:
                _state = "refused";
                _node.Refuse(
                    $"Replica {_replica} holds log [{answer.Begin}, {answer.DurableUntil}) of term {answer.ContentTerm}, which this primary (term {_node.Term}, " +
                    $"log [{begin}, {end}){(_node.LogWasNew ? ", created at this start" : "")}) does not have: this node's log is not the newest of the group. Nothing is " +
                    "acknowledged here. Promote that replica with a newer term, then start this node as a replica (docs/replication.md, \"Which log wins\").");
                return (-1, false);
        }
    }

    /// <summary>
    /// Asks the replica to cut its log back to <paramref name="cut"/> (where this log's term after the replica's content
    /// term began); returns where shipping starts: there when it did, this log's begin with a reset when its bytes below
    /// the cut point are not this log's (<see cref="ShipmentOutcome.Diverged"/>), -1 when fenced.
    /// </summary>
    private async Task<(long From, bool Reset)> CutBackAsync(CommittedLogReader reader, ShipmentResult answer, long cut, long begin, CancellationToken cancellationToken)
    {
        var from = ReplicaLog.CutSumFrom(begin, answer.Begin, cut);
        var buffer = new byte[cut - from];
        if (!reader.TryRead(from, buffer))
        {
            _state = "catching up (total)";
            Interlocked.Increment(ref _total);
            return (begin, true); // truncated here meanwhile: what the replica lacks is before this log's begin
        }

        _state = "catching up (cut)";
        ReplicationServiceEvents.CuttingBack(_logger, _replica.ToString(), answer.DurableUntil, answer.ContentTerm, cut);
        var result = await SendAsync(new Shipment(_node.Term, cut, begin, 0, false, ReadOnlyMemory<byte>.Empty, Cut: cut, CutSum: Crc32C.Compute(buffer)), cancellationToken)
            .ConfigureAwait(false);
        switch (result.Outcome)
        {
            case ShipmentOutcome.Appended when result.DurableUntil == cut:
                _state = "catching up (partial)";
                Interlocked.Increment(ref _cut);
                return (cut, false);
            case ShipmentOutcome.Fenced:
                _state = "fenced";
                _node.Fence(result.Term, _replica.ToString());
                return (-1, false);
            case ShipmentOutcome.Diverged:
                ReplicationServiceEvents.CutRefused(_logger, _replica.ToString(), cut, begin);
                _state = "catching up (total)";
                Interlocked.Increment(ref _total);
                return (begin, true);
            default:
                // It moved meanwhile (restarted, emptied): where it stands is asked again.
                throw new ReplicationProtocolException($"{_replica} answered a cut back to {cut} with {result.Outcome.ToString().ToLowerInvariant()} (until {result.DurableUntil})");
        }
    }

    /// <summary>
    /// Where a replica whose last bytes are not this log's may be cut back to ([Replicated FS]'s partial recovery of a
    /// rejoining node; docs/replication.md, "Rejoining by cutting back"): where this log's first term after the replica's
    /// content term began (<see cref="TermHistory.SuccessorStart"/>), when that lies inside both logs, below the replica's
    /// end, and above both begins (so that the cut's checksum covers some bytes); else null.
    /// </summary>
    internal static long? CutPoint(TermHistory history, in ShipmentResult answer, long begin, long end)
        => history.SuccessorStart(answer.ContentTerm) is { } cut && cut >= begin && cut >= answer.Begin && cut < answer.DurableUntil && cut <= end &&
           ReplicaLog.CutSumFrom(begin, answer.Begin, cut) < cut
            ? cut
            : null;

    /// <summary>How a replica that holds a log catches up, or whether it must not be touched ([Replicated FS] §4; docs/replication.md).</summary>
    internal enum CatchUp
    {
        /// <summary>Its last bytes are this log's: send the suffix after them.</summary>
        Partial,

        /// <summary>It holds an older primary's tail past where this log's next term began: cut it back to there, then send the suffix.</summary>
        Cut,

        /// <summary>Reset it and send this log from its begin: it is behind the begin, or holds an older primary's history.</summary>
        Total,

        /// <summary>It holds what this log lacks, of this primary's own term (or this log is new): this log is not the newest.</summary>
        Refuse,
    }

    /// <summary>
    /// The catch-up decision for a replica that holds a log (its answer to the handshake) whose last bytes compare to
    /// this log's as <paramref name="tail"/>, for a primary of <paramref name="term"/> whose log was created at this start
    /// when <paramref name="logWasNew"/>; <paramref name="cut"/>: where it may be cut back to (<see cref="CutPoint"/>), or null.
    /// </summary>
    internal static CatchUp Decide(in ShipmentResult answer, TailComparison tail, long term, bool logWasNew, long? cut = null) => tail switch
    {
        TailComparison.Same => CatchUp.Partial,
        // Behind this log's begin (or its last bytes are): what it lacks was truncated here, this log holds all after.
        TailComparison.BelowBegin => CatchUp.Total,
        // It holds more, or other bytes at the same place. Bytes of this primary's own term can only have come from this
        // primary: if it lacks them, its log is not the newest (a lost or restored directory): never reset them away. A log
        // created at this start never replaces a replica's either. An older primary's history past where this term began
        // was never acknowledged by a majority: cut back to where the next term began here when that is known (the
        // replica then checks that its bytes below are this log's), else replaced.
        _ => answer.ContentTerm >= term || logWasNew ? CatchUp.Refuse : cut is not null ? CatchUp.Cut : CatchUp.Total,
    };

    /// <summary>How a replica's last bytes compare to this log's at the same addresses.</summary>
    internal enum TailComparison
    {
        /// <summary>The same bytes.</summary>
        Same,

        /// <summary>Other bytes: another primary's history.</summary>
        Different,

        /// <summary>They lie before this log's begin (truncated here): not comparable, not needed.</summary>
        BelowBegin,

        /// <summary>The replica ends after this log's durable end.</summary>
        Ahead,
    }

    /// <summary>Whether the replica's last bytes (its answer's checksum) are this log's bytes at the same place.</summary>
    private static TailComparison CompareTail(CommittedLogReader reader, in ShipmentResult answer, long begin)
    {
        var from = ReplicaLog.TailChecksumFrom(answer.Begin, answer.DurableUntil);
        if (from < begin)
        {
            return TailComparison.BelowBegin;
        }

        var length = (int)(answer.DurableUntil - from);
        if (length == 0)
        {
            return TailComparison.Same;
        }

        var buffer = ArrayPool<byte>.Shared.Rent(length);
        try
        {
            return !reader.TryRead(from, buffer.AsSpan(0, length)) ? TailComparison.BelowBegin
                : Crc32C.Compute(buffer.AsSpan(0, length)) == answer.TailChecksum ? TailComparison.Same : TailComparison.Different;
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(buffer);
        }
    }

    private async Task StreamAsync(CommittedLogReader reader, long from, bool reset, CancellationToken cancellationToken)
    {
        var buffer = new byte[_options.MaxShipmentBytes];
        while (!cancellationToken.IsCancellationRequested && _watermark.Fault is null)
        {
            var durable = _log.LocalDurableUntil;
            // The begin is read before the anchor: an anchor read after it is at least as new as the truncation it allowed.
            var begin = _log.BeginAddress;
            var anchor = _node.AnchoredLsn;
            if (!reset && from < begin)
            {
                return; // truncated past what the replica holds: the next handshake resets it
            }

            if (durable <= from && !reset)
            {
                _state = "streaming";
                // Idle: wait for the next commit, or send a heartbeat (learns a newer term; moves the anchor and begin).
                if (!await _wake.WaitAsync(_options.EffectiveHeartbeatInterval, cancellationToken).ConfigureAwait(false))
                {
                    await ShipAsync(new Shipment(_node.Term, from, begin, anchor, false, ReadOnlyMemory<byte>.Empty), from, cancellationToken).ConfigureAwait(false);
                }

                continue;
            }

            var until = PieceEnd(from, durable);
            if (until - from > buffer.Length)
            {
                buffer = new byte[until - from];
            }

            if (!reader.TryRead(from, buffer.AsSpan(0, (int)(until - from))))
            {
                return; // truncated meanwhile: the next handshake decides
            }

            var shipment = new Shipment(_node.Term, from, reset ? from : begin, anchor, reset, buffer.AsMemory(0, (int)(until - from)));
            if (!await ShipAsync(shipment, until, cancellationToken).ConfigureAwait(false))
            {
                return;
            }

            from = until;
            reset = false;
        }
    }

    /// <summary>Sends one shipment; true when the replica holds it (and the watermark knows), false to start over with a handshake.</summary>
    private async Task<bool> ShipAsync(Shipment shipment, long until, CancellationToken cancellationToken)
    {
        var answer = await SendAsync(shipment, cancellationToken).ConfigureAwait(false);
        switch (answer.Outcome)
        {
            case ShipmentOutcome.Appended when answer.DurableUntil == until:
                Volatile.Write(ref _shippedUntil, until);
                _lag.Held(until);
                Interlocked.Increment(ref _shipments);
                Interlocked.Add(ref _bytes, shipment.Bytes.Length);
                _watermark.Report(_index, until);
                return true;
            case ShipmentOutcome.Fenced:
                _state = "fenced";
                _node.Fence(answer.Term, $"replica {_replica} has taken it");
                return false;
            default:
                return false; // the replica restarted, or was reset meanwhile: where it stands is asked again
        }
    }

    /// <summary>
    /// Where the next shipment ends: what is durable here when that is within <see cref="ReplicationOptions.MaxShipmentBytes"/>
    /// (it is the end of a commit record); otherwise the last commit record's end within that size, found by walking the
    /// log's own files (or the first one past it, for a commit bigger than a shipment).
    /// </summary>
    private long PieceEnd(long from, long durable)
    {
        if (durable - from <= _options.MaxShipmentBytes)
        {
            return durable;
        }

        var ends = new CommitEnds();
        LogRecoveryScanner.Visit(_log.Directory, _logOptions, from, Math.Min(durable, from + _options.MaxShipmentBytes), ends);
        var within = ends.LastAtOrBefore(from + _options.MaxShipmentBytes);
        if (within > from)
        {
            return within;
        }

        LogRecoveryScanner.Visit(_log.Directory, _logOptions, from, durable, ends);
        var first = ends.FirstAfter(from);
        return first > from && first <= durable ? first : durable;
    }

    private async Task<ShipmentResult> SendAsync(Shipment shipment, CancellationToken cancellationToken)
    {
        var answer = await ReplicationMessages.SendAsync(_http, _append, shipment, _node, cancellationToken).ConfigureAwait(false);
        Interlocked.Exchange(ref _replicaTerm, answer.Term);
        return answer;
    }

    public void Dispose()
    {
        _watermark.LocalAdvanced -= Wake;
        _watermark.LocalAdvanced -= Sample;
        _wake.Dispose();
    }

    private void Sample() => _lag.LocallyDurable(_watermark.LocalUntil);

    private void Wake()
    {
        try
        {
            if (_wake.CurrentCount == 0)
            {
                _wake.Release();
            }
        }
        catch (Exception ex) when (ex is SemaphoreFullException or ObjectDisposedException)
        {
            // Woken already, or stopped.
        }
    }

    /// <summary>Collects the ends of the commit records a walk passes.</summary>
    private sealed class CommitEnds : ILogScanVisitor
    {
        private readonly List<long> _ends = [];

        public void Record(RecordHeader header, ReadOnlySpan<byte> body)
        {
        }

        public void Committed(long until) => _ends.Add(until);

        public long LastAtOrBefore(long limit) => _ends.Where(e => e <= limit).DefaultIfEmpty(0).Max();

        public long FirstAfter(long from) => _ends.Where(e => e > from).DefaultIfEmpty(0).Min();
    }
}

/// <summary>A replica's answer that is not one (a wrong status, no body): the shipper asks again later.</summary>
internal sealed class ReplicationProtocolException(string message) : Exception(message);

/// <summary>
/// A replica's lag in time, as PostgreSQL's walsender measures its standbys' (its <c>LagTracker</c>): a sample (durable end,
/// when) at each local commit, dropped once the replica holds that end; the lag is the age of the oldest sample left. At most
/// <see cref="MaxSamples"/> are kept: past that the newest one is moved forward instead (its time stays), which can only make
/// the lag look longer, never shorter.
/// </summary>
internal sealed class ReplicaLag(TimeProvider time)
{
    internal const int MaxSamples = 4096;

    private readonly Lock _gate = new();
    private readonly LinkedList<(long Until, long At)> _samples = new();
    private long _held;

    /// <summary>The log holds everything below <paramref name="until"/> durably, from now on.</summary>
    public void LocallyDurable(long until)
    {
        lock (_gate)
        {
            if (until <= _held || (_samples.Last is { } last && until <= last.Value.Until))
            {
                return;
            }

            if (_samples.Count < MaxSamples)
            {
                _samples.AddLast((until, time.GetTimestamp()));
            }
            else
            {
                _samples.Last!.Value = (until, _samples.Last.Value.At);
            }
        }
    }

    /// <summary>The replica holds everything below <paramref name="until"/>.</summary>
    public void Held(long until)
    {
        lock (_gate)
        {
            _held = Math.Max(_held, until);
            while (_samples.First is { } first && first.Value.Until <= _held)
            {
                _samples.RemoveFirst();
            }
        }
    }

    /// <summary>How long ago the oldest durable record the replica does not hold became durable (zero: it holds them all).</summary>
    public TimeSpan Lag
    {
        get
        {
            lock (_gate)
            {
                return _samples.First is { } first ? time.GetElapsedTime(first.Value.At) : TimeSpan.Zero;
            }
        }
    }
}
