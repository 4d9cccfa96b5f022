using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;
using PersistentServices.Diagnostics;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Recovery;
using PersistentServices.Sessions;
using PersistentServices.SharedState;

namespace PersistentServices.Hosting;

/// <summary>Where recovery is ([MSP Fig. 12]).</summary>
internal enum RecoveryStage
{
    NotStarted,
    Scanning,
    Replaying,
    Ready,
    Failed,

    /// <summary>The host is stopping: running requests finish, new ones get 503, then everything is checkpointed.</summary>
    Draining,
}

/// <summary>
/// The service's persistence runtime: its one log, its sessions and where recovery stands. A singleton; its log is
/// opened from <c>UsePersistentServices()</c> on (<see cref="StartOpening"/>), requests are served once that is done
/// (the persistence middleware holds them until then), and it is disposed (log committed and closed) when the host stops.
/// </summary>
internal sealed class PersistentRuntime : IAsyncDisposable
{
    private readonly ILogger _logger;
    private DurableLog? _log;
    private volatile RecoveryStage _stage;
    private Exception? _failure;

    public PersistentRuntime(IOptions<PersistentServicesOptions> options, TimeProvider time, PersistentServicesMetrics metrics, Checkpoints.CrashPoints crashPoints,
        ILogger<PersistentRuntime> logger, Serialization.ValueCodec? codec = null, Testing.ReplayCheckRun? replayCheck = null)
    {
        Metrics = metrics;
        CrashPoints = crashPoints;
        Options = options.Value;
        replayCheck?.Apply(Options); // the replay check recovers its sandbox's copy, whatever the application configured
        Time = time;
        _logger = logger;
        Codec = codec ?? new Serialization.OrleansValueCodec();
        Sessions = new SessionTable(new SessionMemory(Options.EffectiveSessionMemoryBudgetBytes, Options.MaxBufferedReplyBytes));
        metrics.ObserveSessions(Sessions);
    }

    /// <summary>The service's instruments (meter <c>PersistentServices</c>, from the host's <c>IMeterFactory</c>).</summary>
    public PersistentServicesMetrics Metrics { get; }

    /// <summary>The crash points the service's tests armed (DI; <see cref="Checkpoints.CrashPoints.None"/> unless a test program registered one).</summary>
    public Checkpoints.CrashPoints CrashPoints { get; }

    public PersistentServicesOptions Options { get; }

    /// <summary>How user values (session state in checkpoints, shared variables) are written to the log.</summary>
    public Serialization.ValueCodec Codec { get; }

    /// <summary>The service checkpoint, anchor and truncation (valid once the log is open).</summary>
    public Checkpoints.ServiceCheckpointer Checkpointer => _checkpointer ?? throw new InvalidOperationException("The persistent log is not open yet.");

    private Checkpoints.ServiceCheckpointer? _checkpointer;

    /// <summary>Persistent requests executing now (a drain waits for them).</summary>
    public int Executing => Volatile.Read(ref _executing);

    private int _executing;

    /// <summary>Counts a persistent request as executing until the returned value is disposed; null while draining (refuse it).</summary>
    public ExecutingRequest? TryBeginExecution()
    {
        Interlocked.Increment(ref _executing);
        if (_stage == RecoveryStage.Draining)
        {
            Interlocked.Decrement(ref _executing);
            return null;
        }

        return new ExecutingRequest(this);
    }

    public readonly struct ExecutingRequest(PersistentRuntime runtime) : IDisposable
    {
        public void Dispose() => Interlocked.Decrement(ref runtime._executing);
    }

    /// <summary>The host is stopping: new persistent, read-only and session requests get 503; running ones finish.</summary>
    public void BeginDrain()
    {
        if (_stage is RecoveryStage.Replaying or RecoveryStage.Ready)
        {
            Interlocked.CompareExchange(ref _drainBegan, Time.GetTimestamp(), 0);
            _stage = RecoveryStage.Draining;
        }
    }

    private long _drainBegan;

    /// <summary>Whether the host is draining (it stops: running requests finish, new ones get 503).</summary>
    public bool IsDraining => _stage == RecoveryStage.Draining;

    /// <summary>
    /// Whether a call of a running request that found its callee out of reach (or answering 503) is asked again: always,
    /// except in a drain that began more than <see cref="PersistentCallOptions.DrainRetryTime"/> ago.
    /// </summary>
    public bool CallRetriesAllowed
        => _stage != RecoveryStage.Draining || Volatile.Read(ref _drainBegan) is var began && (began == 0 || Time.GetElapsedTime(began) < Options.Calls.DrainRetryTime);

    /// <summary>
    /// Fires when calls to other services should stop being retried: the host's shutdown timeout ended the drain, or the
    /// host stopped with nothing to drain (recovering). Until then a call of a running request is retried while the
    /// service drains, so the request finishes and its reply goes out (docs/calls.md, condition 4).
    /// </summary>
    public CancellationToken CallsAbandoned => _callsAbandoned.Token;

    private readonly CancellationTokenSource _callsAbandoned = new();

    /// <summary>Stops the retries of every call in flight (<see cref="CallsAbandoned"/>); their requests are abandoned (503).</summary>
    public void AbandonCalls() => _callsAbandoned.Cancel();

    /// <summary>This service's place in its service domain (inactive without members).</summary>
    public Domain.ServiceDomain Domain => _domain ??= new Domain.ServiceDomain(this, _logger);

    private Domain.ServiceDomain? _domain;

    /// <summary>Signs what this service sends to the deployment's other services and verifies what they send (docs/calls.md, "Who may call").</summary>
    public Calls.PeerAuthentication Peers => _peers ??= new Calls.PeerAuthentication(Options.Calls, Options.ServiceName, Time, _logger);

    private Calls.PeerAuthentication? _peers;

    /// <summary>
    /// Before a session checkpoint: in a domain, a distributed flush of the session's DV ([MSP §3.2]: the checkpointed state
    /// must never be an orphan). False when it cannot be made now (a member out of reach, or the session is an orphan):
    /// the checkpoint waits for a later occasion.
    /// </summary>
    public async Task<bool> BeforeSessionCheckpointAsync(Sessions.Session session, CancellationToken cancellationToken)
    {
        if (!Domain.IsMember(Options.ServiceName))
        {
            return true;
        }

        try
        {
            await Domain.FlushAsync(session.Dv, cancellationToken).ConfigureAwait(false);
            return true;
        }
        catch (Http.RequestAbandonedException)
        {
            return false;
        }
    }

    /// <summary>Rolls back sessions found to be orphans (set when the service is in a domain).</summary>
    public Domain.OrphanRecovery? Orphans { get; set; }

    /// <summary>While recovered sessions replay: their queue, so a waiting client's session goes first.</summary>
    public ReplayQueue? Replays { get; set; }

    /// <summary>Sessions whose replay diverged and that are quarantined.</summary>
    public int QuarantinedSessions
    {
        get
        {
            // Counted among the live sessions (a health probe's pass over the table): one that ends, expires or is released
            // no longer counts, so health returns to Healthy once the last one is gone.
            var count = 0;
            foreach (var session in Sessions.Enumerate())
            {
                if (session.Diverged is not null && !session.Ended)
                {
                    count++;
                }
            }

            return count;
        }
    }

    public TimeProvider Time { get; }

    public SessionTable Sessions { get; }

    /// <summary>True the first time this service refuses an unidentified principal (warned once per service, then at debug level).</summary>
    public bool FirstUnidentifiedOwner() => Interlocked.Exchange(ref _unidentifiedOwnerWarned, 1) == 0;

    private int _unidentifiedOwnerWarned;

    public RecoveryStage Stage => _stage;

    public Exception? Failure => _failure;

    public AnalysisResult? Analysis { get; private set; }

    /// <summary>The service's shared variables (valid once the log is open).</summary>
    public SharedStateStore Shared => _shared ?? throw new InvalidOperationException("The persistent log is not open yet.");

    /// <summary>The failure-free period the service is in ([MSP §3.1]).</summary>
    public long Epoch { get; private set; }

    private SharedStateStore? _shared;

    /// <summary>
    /// The service's shared variables once the analysis scan rolled them forward and the new epoch is durable, else null:
    /// what the persistence middleware enters for each request (<see cref="SharedStateStore.Enter"/>), so the service's
    /// shared state handles find this store and no other service's.
    /// </summary>
    public SharedStateStore? ServingShared => Volatile.Read(ref _servingShared);

    private SharedStateStore? _servingShared;

    /// <summary>The open log; throws before recovery opened it.</summary>
    public DurableLog Log => _log ?? throw new InvalidOperationException("The persistent log is not open yet.");

    /// <summary>The log's fault, once it faulted.</summary>
    public LogFaultedException? LogFault => _log?.Fault;

    /// <summary>True when requests may be logged: the log is open and has not faulted, and recovery has not failed.</summary>
    public bool IsAvailable => _log is { Fault: null } && _stage is RecoveryStage.Replaying or RecoveryStage.Ready;

    /// <summary>
    /// Whether a persistent request already counted as executing (<see cref="TryBeginExecution"/>) may run: as
    /// <see cref="IsAvailable"/>, and also while the service drains, which waits for it.
    /// </summary>
    public bool CanRunAdmitted => _log is { Fault: null } && _stage is RecoveryStage.Replaying or RecoveryStage.Ready or RecoveryStage.Draining;

    /// <summary>Opens the log (verifying it) and runs the analysis scan. Before the server accepts traffic.</summary>
    /// <summary>
    /// Opens the log and runs the analysis scan, once, on the thread pool: started by <c>UsePersistentServices()</c>, so the
    /// log's verification and scan overlap the rest of the application's startup (mapping endpoints, starting the host),
    /// and awaited by the recovery host before the server accepts traffic. Every caller gets the same task.
    /// </summary>
    public Task StartOpening()
    {
        lock (_openingLock)
        {
            return _opening ??= Task.Run(() => OpenAndAnalyzeAsync(_disposing.Token));
        }
    }

    private readonly Lock _openingLock = new();
    private readonly CancellationTokenSource _disposing = new();
    private Task? _opening;

    private async Task OpenAndAnalyzeAsync(CancellationToken cancellationToken)
    {
        _stage = RecoveryStage.Scanning;
        try
        {
            // The verification walk keeps the records the analysis scan needs, so the scan reads nothing a second time.
            var logOptions = Options.BuildLogOptions();
            var captured = AnalysisScan.CaptureFor(logOptions, readAtRest: !Domain.Enabled);
            _log = await DurableLog.OpenAsync(logOptions, _logger, captured, Metrics, CrashPoints, cancellationToken).ConfigureAwait(false);
            _shared = new SharedStateStore(_log, Options.ServiceName, Options.SharedCheckpointInterval, _logger, Codec);
            var directory = Path.GetFullPath(Options.LogDirectory);
            var durableAtOpen = _log.DurableUntil;
            // Outside a domain, sessions at rest are read directly and the scan starts after them (docs/checkpoints.md); in a
            // domain the scan also relearns members' recovered states from the log, so it starts where it always did.
            Analysis = await AnalysisScan.RunAsync(_log, directory, Sessions, _shared, cancellationToken, recovered: Domain.Recovered, readAtRest: !Domain.Enabled, captured: captured)
                .ConfigureAwait(false);
            _checkpointer = new Checkpoints.ServiceCheckpointer(_log, directory, Sessions, _shared, Options.IdleCheckpointAfter, _logger, atRest: !Domain.Enabled)
            {
                BeforeSessionCheckpoint = BeforeSessionCheckpointAsync,
            };
            if (Domain.IsMember(Options.ServiceName))
            {
                // A shared variable's checkpoint must never be an orphan either (MSP §3.3): its DV is flushed first.
                _shared.DistributedFlush = Domain.FlushAsync;
                _shared.Recovered = Domain.Recovered;
                _shared.OrphanError = static lost => new Domain.OrphanException(lost);
            }

            // A new epoch starts with every recovery; it is forced so no two failure-free periods share one (LSNs of a
            // lost period are reused by the next).
            Epoch = Analysis.LastEpoch + 1;

            // In a domain, this recovery's recovered state number for the epoch that ended (MSP §4.3): everything it logged
            // is durable up to the last record before durableAtOpen; members learn it from the broadcast.
            if (Domain.Enabled && Analysis.LastEpoch > 0)
            {
                var own = new Domain.RecoveredStateNumber(Options.ServiceName, new Domain.StateId(Analysis.LastEpoch, durableAtOpen - 1));
                if (Domain.Recovered.Learn(own))
                {
                    _log.Append(RecordKind.RecoveredState, new RecoveredState { Service = own.Service, Epoch = own.State.Epoch, Lsn = own.State.Lsn });
                }
            }

            var epochLsn = _log.Append(RecordKind.EpochStarted, new EpochStarted { Epoch = Epoch, Service = Options.ServiceName });
            await _log.WaitUntilDurableAsync(epochLsn, cancellationToken).ConfigureAwait(false);
            _shared.Epoch = Epoch;
            _checkpointer.Epoch = Epoch;
            Volatile.Write(ref _servingShared, _shared);

            // "Make an MSP checkpoint" after the scan (MSP Fig. 12): the anchor moves to what this scan found.
            await _checkpointer.TakeAsync(cleanShutdown: false, cancellationToken).ConfigureAwait(false);
            _stage = RecoveryStage.Replaying;
        }
        catch (Exception ex)
        {
            Fail(ex);
            throw;
        }
    }

    public void MarkReady()
    {
        if (_stage == RecoveryStage.Replaying)
        {
            _stage = RecoveryStage.Ready;
        }
    }

    public void Fail(Exception error)
    {
        _failure ??= error;
        _stage = RecoveryStage.Failed;
    }

    /// <summary>The runtime was disposed (its log closed): a host stopped after its disposal (WebApplicationFactory does that) finds nothing to drain.</summary>
    public bool IsDisposed => Volatile.Read(ref _disposed) != 0;

    private int _disposed;

    public async ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
        {
            return;
        }

        // An open still running (a host built and never started, or stopped while recovering) ends first: it owns the log.
        await _disposing.CancelAsync().ConfigureAwait(false);
        Task? opening;
        lock (_openingLock)
        {
            opening = _opening;
        }

        if (opening is not null)
        {
            await opening.ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
        }

        _disposing.Dispose();
        AbandonCalls();   // not disposed: a handler may still read its token (a CTS without timers holds nothing to free)
        _checkpointer?.Dispose();
        _domain?.Dispose();
        if (_log is { } log)
        {
            await log.DisposeAsync().ConfigureAwait(false);
        }
    }
}
