using System.Diagnostics;
using System.Globalization;
using System.Net.Http.Json;
using Microsoft.AspNetCore.Connections;
using DotNext.Net.Cluster.Consensus.Raft;
using DotNext.Net.Cluster.Consensus.Raft.Http;
using DotNext.Net.Cluster.Consensus.Raft.StateMachine;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;
using PersistentServices.Calls;
using PersistentServices.Http;

namespace PersistentServices.Replication;

/// <summary>
/// Automatic failover (<see cref="FailoverMode.Raft"/>, docs/replication.md "Failover"): the group's nodes and witnesses
/// are the members of a Raft cluster (DotNext's, over HTTP at <see cref="ProtocolPath"/> on the service's own port, its
/// term and vote kept in a write-ahead log under the log directory). Raft elects one leader at a time; the leader is the
/// group's <b>failover coordinator</b>: it asks every log node where it stands (<c>GET /ps/replication/status</c>) every
/// sixth of the election timeout, and when no node has answered as the primary twice in a row (once, when the primary's
/// port refuses connections, or when its replicas have not heard from it for an election timeout and it does not answer
/// within one), it promotes the replica
/// with the longest log, with a term above every term it saw (the promotion's own majority claim,
/// <see cref="ReplicationNode.PromoteAsync"/>, keeps that safe whatever else is running). The election is DotNext's;
/// what is ours is the rule for whom to promote.
/// Raft's messages are signed with the peer key like every message between the deployment's nodes: an unsigned one is
/// refused (401) before DotNext sees it.
/// </summary>
internal sealed partial class RaftFailover : IHostedLifecycleService, IAsyncDisposable
{
    /// <summary>Where Raft's messages arrive (DotNext's protocol path, the path of each member's address).</summary>
    public const string ProtocolPath = "/ps/consensus";

    /// <summary>The PS-Role of Raft's messages (what their signatures cover).</summary>
    private const string SignedRole = "consensus";

    /// <summary>The largest Raft message taken (no log entries travel: DotNext's log holds no data here).</summary>
    private const int MaxMessageBytes = 1 << 20;

    /// <summary>How many status rounds in a row without a primary before the coordinator promotes.</summary>
    private const int MissesBeforePromotion = 2;

    private readonly PersistentServicesOptions _service;
    private readonly ReplicationOptions _options;
    private readonly ReplicationNode _node;
    private readonly IHttpClientFactory _httpClients;
    private readonly ILoggerFactory _loggerFactory;
    private readonly IServiceProvider _host;
    private readonly TimeProvider _time;
    private readonly ILogger<RaftFailover> _logger;
    private readonly CancellationTokenSource _stopping = new();
    private readonly Lazy<ServiceProvider> _raft;
    private readonly Lazy<RequestDelegate> _handler;
    private Task _coordinating = Task.CompletedTask;
    private IRaftCluster? _cluster;
    private int _disposed;

    public RaftFailover(IOptions<PersistentServicesOptions> options, ReplicationNode node, IHttpClientFactory httpClients, ILoggerFactory loggerFactory,
        IServiceProvider host, TimeProvider time)
    {
        _service = options.Value;
        _options = _service.Replication;
        _node = node;
        _httpClients = httpClients;
        _loggerFactory = loggerFactory;
        _host = host;
        _time = time;
        _logger = loggerFactory.CreateLogger<RaftFailover>();
        _raft = new Lazy<ServiceProvider>(BuildRaftServices, LazyThreadSafetyMode.ExecutionAndPublication);
        _handler = new Lazy<RequestDelegate>(BuildHandler, LazyThreadSafetyMode.ExecutionAndPublication);
    }

    /// <summary>Whether this node takes part in automatic failover.</summary>
    public bool Enabled => _options.ConfiguredRole != ReplicationRole.None && _options.Failover == FailoverMode.Raft;

    /// <summary>This node's Raft member address: its base address with <see cref="ProtocolPath"/>.</summary>
    internal static Uri MemberAddress(Uri node) => new(node, ProtocolPath);

    /// <summary>Every voter: the log nodes (this one included) and the witnesses.</summary>
    private IEnumerable<Uri> Voters
        => _options.LogNodes.Concat(_options.Witnesses).Append(_options.Address!).DistinctBy(u => MemberAddress(u).ToString().ToLowerInvariant());

    /// <summary>
    /// The Raft member's own services, apart from the application's: DotNext registers its cluster as a hosted service of
    /// whatever collection it is given, and this one exists only when failover is configured. It shares the host's logging.
    /// </summary>
    private ServiceProvider BuildRaftServices()
    {
        var services = new ServiceCollection();
        services.AddSingleton<ILoggerFactory>(new QuietLoggerFactory(_loggerFactory));
        services.AddSingleton(typeof(ILogger<>), typeof(Logger<>));
        services.AddSingleton(_host.GetService<DiagnosticListener>() ?? new DiagnosticListener("PersistentServices.Replication.Raft"));
        services.AddSingleton<DiagnosticSource>(sp => sp.GetRequiredService<DiagnosticListener>());
        services.AddSingleton(_host.GetRequiredService<System.Diagnostics.Metrics.IMeterFactory>());
        services.AddOptions();
        services.AddSingleton<IHttpMessageHandlerFactory>(new SigningHandlers(this));
        var directory = Path.Combine(Path.GetFullPath(_service.LogDirectory), "consensus");
        Directory.CreateDirectory(directory);
        services.AddSingleton(IStateMachine.CreateNoOp());
        services.UsePersistentLog(new WriteAheadLog.Options { Location = directory });
        var voters = Voters.Select(MemberAddress).ToList();
        services.UseInMemoryConfigurationStorage(members =>
        {
            foreach (var voter in voters)
            {
                members.Add(new UriEndPoint(voter));
            }
        });
        var upper = (int)_options.ElectionTimeout.TotalMilliseconds;
        services.ConfigureLocalNode(member =>
        {
            member.PublicEndPoint = MemberAddress(_options.Address!);
            member.ColdStart = false;
            member.LowerElectionTimeout = upper / 2;
            member.UpperElectionTimeout = upper;
            member.RequestTimeout = _options.ElectionTimeout;
            member.RpcTimeout = TimeSpan.FromMilliseconds(upper / 2);
            member.IsLeaderLeaseEnabled = true; // the coordinator acts only while it holds the lease (CoordinateAsync)
        });
        return services.BuildServiceProvider();
    }

    private RequestDelegate BuildHandler()
    {
        var app = new ApplicationBuilder(_raft.Value);
        app.UseConsensusProtocolHandler();
        return app.Build();
    }

    /// <summary>A Raft message: verified as sent by a node of this service, then DotNext's.</summary>
    public async Task HandleAsync(HttpContext context)
    {
        if (!Enabled)
        {
            context.Response.StatusCode = StatusCodes.Status404NotFound;
            return;
        }

        if (context.Request.ContentLength is > MaxMessageBytes)
        {
            await ProtocolProblems.WriteAsync(context, 413, "replication-too-large", "Raft message too large",
                string.Create(CultureInfo.InvariantCulture, $"A Raft message has at most {MaxMessageBytes} bytes.")).ConfigureAwait(false);
            return;
        }

        var body = await ReadBoundedAsync(context.Request.Body, context.RequestAborted).ConfigureAwait(false);
        if (body is null)
        {
            await ProtocolProblems.WriteAsync(context, 413, "replication-too-large", "Raft message too large",
                string.Create(CultureInfo.InvariantCulture, $"A Raft message has at most {MaxMessageBytes} bytes.")).ConfigureAwait(false);
            return;
        }

        var caller = context.Request.Headers[ProtocolHeaders.Caller].ToString();
        var message = new PeerMessage(context.Request.Method, context.Request.PathBase + context.Request.Path + context.Request.QueryString, caller,
            context.Request.Headers[ProtocolHeaders.Callee].ToString(), "", "", SignedRole, "", context.Request.ContentType ?? "");
        var refused = !string.Equals(caller, _service.ServiceName, StringComparison.Ordinal)
            ? "a sender that is not a node of this service (PS-Caller)"
            : _node.Peers.Verify(context.Request.Headers[ProtocolHeaders.Signature].ToString(), message, body);
        if (refused is not null)
        {
            ReplicationServiceEvents.MessageRefused(_logger, ProtocolPath, refused);
            await ProtocolProblems.WriteAsync(context, 401, "replication-peer", "Not a node of this service",
                $"Raft messages are accepted only from this service's own nodes, signed with its peer key: this one had {refused}.").ConfigureAwait(false);
            return;
        }

        context.Request.Body = new MemoryStream(body, writable: false);
        await _handler.Value(context).ConfigureAwait(false);
    }

    private static async Task<byte[]?> ReadBoundedAsync(Stream body, CancellationToken cancellationToken)
    {
        using var buffer = new MemoryStream();
        var chunk = new byte[16 << 10];
        int read;
        while ((read = await body.ReadAsync(chunk, cancellationToken).ConfigureAwait(false)) > 0)
        {
            if (buffer.Length + read > MaxMessageBytes)
            {
                return null;
            }

            buffer.Write(chunk, 0, read);
        }

        return buffer.ToArray();
    }

    public async Task StartAsync(CancellationToken cancellationToken)
    {
        if (!Enabled)
        {
            return;
        }

        _ = _handler.Value;
        var cluster = _raft.Value.GetRequiredService<IRaftCluster>();
        await ((IHostedService)cluster).StartAsync(cancellationToken).ConfigureAwait(false);
        _cluster = cluster;
        cluster.LeaderChanged += (_, leader) => LeaderChanged(_logger, leader?.EndPoint?.ToString() ?? "none", cluster.Term);
        FailoverStarted(_logger, MemberAddress(_options.Address!).ToString(), string.Join(", ", Voters.Select(MemberAddress)));
        _coordinating = Task.Run(() => CoordinateAsync(cluster, _stopping.Token), CancellationToken.None);
    }

    public Task StartingAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public Task StartedAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    /// <summary>
    /// The host begins to stop (SIGTERM), before any hosted service stops, so while the server still takes connections
    /// and Raft still runs: a primary hands its role to a caught-up replica first (a switchover, docs/replication.md), so
    /// the group has a primary again without waiting for the coordinator to find this one gone. Not done, or not
    /// possible (no replica answers, none catches up in time): the drain goes on as before. (Later, once the server stops
    /// listening, a coordinator would take the refused port for a lost primary and promote in the same round.)
    /// </summary>
    public async Task StoppingAsync(CancellationToken cancellationToken)
    {
        if (Enabled)
        {
            await _node.SwitchoverOnStopAsync().ConfigureAwait(false);
        }
    }

    public Task StoppedAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public async Task StopAsync(CancellationToken cancellationToken)
    {
        if (_cluster is not { } cluster)
        {
            return;
        }

        await _stopping.CancelAsync().ConfigureAwait(false);
        await _coordinating.ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
        await ((IHostedService)cluster).StopAsync(cancellationToken).ConfigureAwait(false);
    }

    /// <summary>
    /// The primary never leads Raft (DotNext's standby mode: it votes, but is never elected): when it dies, the coordinator
    /// is already on another node, and no Raft election lies in the failover's path. A primary that leads resigns first;
    /// a node that is no longer the primary (fenced, or a replica again) can be elected again.
    /// </summary>
    private async Task StandbyWhilePrimaryAsync(IRaftCluster cluster, CancellationToken cancellationToken)
    {
        if (cluster is not DotNext.Net.Cluster.Consensus.Raft.Extensions.IStandbyModeSupport standby)
        {
            return;
        }

        var primary = _node.Role == ReplicationRole.Primary;
        if (primary && !standby.Standby)
        {
            if (cluster.Leader is { IsRemote: false })
            {
                await cluster.ResignAsync(cancellationToken).ConfigureAwait(false);
            }

            if (await standby.EnableStandbyModeAsync(cancellationToken).ConfigureAwait(false))
            {
                StandbyChanged(_logger, true);
            }
        }
        else if (!primary && standby.Standby && await standby.RevertToNormalModeAsync(cancellationToken).ConfigureAwait(false))
        {
            StandbyChanged(_logger, false);
        }
    }

    /// <summary>
    /// The coordinator's loop: while this node leads the Raft cluster, every sixth of the election timeout it asks each log
    /// node where it stands; with no primary answering twice in a row, it promotes the replica holding the most log.
    /// </summary>
    private async Task CoordinateAsync(IRaftCluster cluster, CancellationToken cancellationToken)
    {
        // 50 ms by default: a killed primary (its port refuses) is found within a round, so the round is most of the detection;
        // a round is one status request per node, a few hundred bytes each.
        var interval = _options.ElectionTimeout / 6;
        var http = _httpClients.CreateClient(ReplicationNode.HttpClientName);
        var misses = 0;
        var lastNoCandidate = 0L;
        var refusals = 0;
        var backOffUntil = 0L;
        var wrongCandidate = false;
        long leaderWithoutLease = 0, lastWithoutLeaseLog = 0;
        while (!cancellationToken.IsCancellationRequested)
        {
            try
            {
                await Task.Delay(interval, _time, cancellationToken).ConfigureAwait(false);
                await StandbyWhilePrimaryAsync(cluster, cancellationToken).ConfigureAwait(false);
                // Only the Raft leader coordinates, as this member sees it. Its lease (below: renewed at every heartbeat a majority
                // answers, DotNext's) keeps a deposed leader that has not heard of it yet from coordinating beside the new one.
                // (Not LeadershipToken: that waits for the term's first entry to commit, which a member that lost its Raft state
                // with its volume can hold back for a long while.)
                if (cluster.Leader is not { IsRemote: false })
                {
                    leaderWithoutLease = 0;
                    misses = 0;
                    continue;
                }

                if (!cluster.TryGetLeaseToken(out var lease) || lease.IsCancellationRequested)
                {
                    // Elected, and no valid lease: DotNext renews it only when a heartbeat round completes with a majority, and a
                    // round can stall on a member (seen with one paused and one restarted on an empty directory, for 30 s and more;
                    // issue 51's nemesis). The lease only keeps a deposed leader from coordinating beside the new one; what keeps a
                    // promotion safe is its own claim at a majority of the log nodes (ReplicationNode.PromoteAsync), and two
                    // coordinators' promotions back off (below). So after twice the election timeout without one, the leader
                    // coordinates anyway, and says so once a second.
                    leaderWithoutLease = leaderWithoutLease == 0 ? _time.GetTimestamp() : leaderWithoutLease;
                    var without = _time.GetElapsedTime(leaderWithoutLease);
                    if (without > TimeSpan.FromSeconds(1) && _time.GetElapsedTime(lastWithoutLeaseLog) > TimeSpan.FromSeconds(1))
                    {
                        LeaderWithoutLease(_logger, (long)without.TotalMilliseconds, cluster.Term);
                        lastWithoutLeaseLog = _time.GetTimestamp();
                    }

                    if (without < _options.ElectionTimeout * 2)
                    {
                        continue; // the misses so far stand: a lease that lapses between rounds does not start the count again
                    }
                }
                else
                {
                    leaderWithoutLease = 0;
                }

                var (statuses, silent) = await RoundAsync(http, cancellationToken).ConfigureAwait(false);
                var newest = statuses.Max(s => s.Status?.Term ?? 0);
                if (_logger.IsEnabled(LogLevel.Debug))
                {
                    Round(_logger, misses, string.Join("; ", statuses.Select(s => s.Status is { } st ? $"{s.Node}: {st.Role} of term {st.Term}" : $"{s.Node}: {s.Error}")));
                }

                // A promotion under way (a switchover's, an operator's, another coordinator's) is a primary about to be: its claim
                // settles who it is; promoting another node meanwhile would only depose it (and that one's claim can wait a round).
                if (statuses.Any(s => s.Status is { Role: nameof(ReplicationRole.Primary) } p && p.Term >= newest) ||
                    statuses.Any(s => s.Status?.Replica is { Promoting: true }))
                {
                    misses = 0;
                    refusals = 0;
                    continue;
                }

                // When every node answered as a replica or refused the connection, the primary is one whose port has no process
                // behind it: one round is enough. Silence (a slow or unreachable node) takes two, each up to StatusTimeout.
                // A primary its replicas have not heard from for an election timeout, and that did not answer within one itself, is
                // hung (SIGSTOP, a dropped port, a stalled process): one round too (RoundAsync).
                var refused = statuses.Any(s => s.Refused) && statuses.All(s => s.Status is not null || s.Refused);
                // Still the leader after the round (not deposed meanwhile); its lease may have lapsed during the round, which a paused
                // member makes frequent (the nemesis saw every round's promotion given up so, for 30 s): the claim keeps it safe.
                if ((++misses < MissesBeforePromotion && !refused && !silent) || cluster.Leader is not { IsRemote: false })
                {
                    continue;
                }

                var candidate = statuses
                    .Where(s => s.Status is { Role: nameof(ReplicationRole.Replica), Replica: { DurableUntil: > 0 } })
                    .OrderByDescending(s => s.Status!.Replica!.ContentTerm)
                    .ThenByDescending(s => s.Status!.Replica!.DurableUntil)
                    .FirstOrDefault();
                var seen = string.Join("; ", statuses.Select(s => s.Status is { } st ? $"{s.Node}: {st.Role} of term {st.Term}" : $"{s.Node}: {s.Error}"));
                if (candidate.Node is null)
                {
                    if (_time.GetElapsedTime(lastNoCandidate) > TimeSpan.FromSeconds(10))
                    {
                        NoCandidate(_logger, seen);
                        lastNoCandidate = _time.GetTimestamp();
                    }

                    continue;
                }

                if (_time.GetTimestamp() < backOffUntil)
                {
                    continue; // a promotion was refused: no new term before the back-off ends (below)
                }

                var term = newest + 1;
                Promoting(_logger, candidate.Node.ToString(), term, candidate.Status!.Replica!.DurableUntil, seen);
                var (promoted, why) = await ReplicationMessages.RequestPromotionAsync(http, candidate.Node, term, Guid.Empty, _node, cancellationToken).ConfigureAwait(false);
                if (promoted)
                {
                    misses = 0;
                    refusals = 0;
                    wrongCandidate = false;
                }
                else if (!wrongCandidate && why.Contains(ReplicationNode.HoldsMore, StringComparison.Ordinal))
                {
                    // Refused only because a node that took the term holds more of the log than the candidate (this round's status
                    // of it was older than its log): no contention to back off from. The next round, at once, reads fresh statuses
                    // and promotes the one that holds the most (issue 51: a paused primary's replacement took 1,065 ms so, against
                    // ~0.5 s). Once in a row only: a second such refusal backs off as any other.
                    wrongCandidate = true;
                    PromotionRefused(_logger, candidate.Node.ToString(), term, why, 0);
                }
                else
                {
                    wrongCandidate = false;
                    // Each refused promotion has spent a term (the candidate took it before its claim): the next one waits a random
                    // half to whole election timeout, doubled at each refusal in a row up to 16 times (Raft's randomized timeouts), so
                    // that a group that cannot elect (too few nodes answer) does not climb a term a round.
                    var backOff = _options.ElectionTimeout * ((1 + Random.Shared.NextDouble()) / 2) * (1 << Math.Min(refusals, 4));
                    refusals++;
                    backOffUntil = _time.GetTimestamp() + (long)(backOff.TotalSeconds * _time.TimestampFrequency);
                    PromotionRefused(_logger, candidate.Node.ToString(), term, why, (long)backOff.TotalMilliseconds);
                }
            }
            catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
            {
                return;
            }
            catch (Exception ex) when (ex is not OutOfMemoryException)
            {
                CoordinatorFailed(_logger, ex);
            }
        }
    }

    /// <summary>
    /// One status round: every log node's status, each within <see cref="StatusTimeout"/>; or, as soon as some node has
    /// not answered for half an election timeout while every replica that did answer has heard nothing from its primary for
    /// a whole one (<see cref="ReplicaStatus.HeardMs"/>, counted on from its answer; the primary's shippers send a heartbeat
    /// at least every third of it), the answers so far with <c>Silent</c>: the primary is hung, and the round does not
    /// wait for its status to time out (issue 51: a hung primary took two such timeouts, 1.2 s and more, to be given up).
    /// The unanswered requests end in the background at their timeout.
    /// </summary>
    private async Task<((Uri Node, ReplicationStatus? Status, string? Error, bool Refused)[] Statuses, bool Silent)> RoundAsync(HttpClient http,
        CancellationToken cancellationToken)
    {
        var started = _time.GetTimestamp();
        var asks = _options.LogNodes.Select(async node => (Answer: await StatusAsync(http, node, cancellationToken).ConfigureAwait(false), At: _time.GetTimestamp())).ToList();
        var all = Task.WhenAll(asks);
        var poll = _options.ElectionTimeout / 6;
        while (!all.IsCompleted)
        {
            await Task.WhenAny(all, Task.Delay(poll, _time, cancellationToken)).ConfigureAwait(false);
            cancellationToken.ThrowIfCancellationRequested();
            if (!all.IsCompleted && _time.GetElapsedTime(started) >= _options.ElectionTimeout / 2)
            {
                var answered = asks.Where(a => a.IsCompletedSuccessfully).Select(a => a.Result).ToArray();
                if (PrimarySilent(answered, asks.Count))
                {
                    // The answers may predate the primary's last shipments (they came at the round's start, before it hung):
                    // the replicas that answered are asked again, so that the candidate is the one that holds the most now.
                    // Otherwise the promotion may be refused ("another node holds more") and the hung primary's replacement
                    // waits a round more (issue 51's nemesis: 1 of 23 pauses took 1,048 ms so).
                    var fresh = await Task.WhenAll(answered.Select(async a => a.Answer.Status?.Replica is null ? a.Answer
                        : await StatusAsync(http, a.Answer.Node, cancellationToken).ConfigureAwait(false) is { Status: not null } again ? again : a.Answer)).ConfigureAwait(false);
                    var now = _time.GetTimestamp();
                    if (PrimarySilent([.. fresh.Select(f => (f, now))], asks.Count))
                    {
                        return (fresh, true);
                    }
                }
            }
        }

        return ([.. (await all.ConfigureAwait(false)).Select(a => a.Answer)], false);
    }

    /// <summary>
    /// Whether a round's answers so far, with some node still silent, say the primary is hung: no node answered as a primary
    /// or as a replica promoting itself, at least one replica answered, and every replica that answered had heard nothing
    /// from its primary for an election timeout by now (a replica that never heard since its start, one just restarted,
    /// says nothing: the round then waits as before).
    /// </summary>
    private bool PrimarySilent(((Uri Node, ReplicationStatus? Status, string? Error, bool Refused) Answer, long At)[] answered, int asked)
    {
        if (answered.Length >= asked)
        {
            return false;
        }

        var replicas = answered.Where(a => a.Answer.Status?.Replica is not null).ToList();
        return replicas.Count > 0 &&
               !answered.Any(a => a.Answer.Status is { Role: nameof(ReplicationRole.Primary) }) &&
               replicas.All(r => r.Answer.Status!.Replica is { Promoting: false, HeardMs: { } heard } &&
                                 TimeSpan.FromMilliseconds(heard) + _time.GetElapsedTime(r.At) >= _options.ElectionTimeout);
    }

    /// <summary>
    /// How long the coordinator waits for a node's status: a dead process refuses at once (a killed primary is given up
    /// within one round, a sixth of the election timeout); a slow one (a loaded host, a pause) is given twice the
    /// election timeout, at least half a second, per round, before it counts as gone.
    /// </summary>
    private TimeSpan StatusTimeout => TimeSpan.FromTicks(Math.Max(_options.ElectionTimeout.Ticks * 2, TimeSpan.FromMilliseconds(500).Ticks));

    private async Task<(Uri Node, ReplicationStatus? Status, string? Error, bool Refused)> StatusAsync(HttpClient http, Uri node, CancellationToken cancellationToken)
    {
        using var timeout = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        timeout.CancelAfter(StatusTimeout);
        try
        {
            var status = await ReplicationMessages.GetStatusAsync(http, node, _node, timeout.Token).ConfigureAwait(false);
            return (node, status, null, false);
        }
        catch (Exception ex) when (ex is HttpRequestException or IOException or System.Text.Json.JsonException ||
                                   (ex is OperationCanceledException && !cancellationToken.IsCancellationRequested))
        {
            var refused = ex is HttpRequestException { InnerException: System.Net.Sockets.SocketException { SocketErrorCode: System.Net.Sockets.SocketError.ConnectionRefused } };
            return (node, null, ex is OperationCanceledException ? "no answer in time" : ex.Message, refused);
        }
    }

    /// <summary>
    /// The host's logging for DotNext's Raft, one level quieter: it warns, with a stack trace, at every message a member
    /// does not answer, which is every message to a killed node during a failover. Its warnings are logged as debug
    /// messages, its errors as warnings; the failover's own events (1437–1443) say what happens.
    /// </summary>
    private sealed class QuietLoggerFactory(ILoggerFactory host) : ILoggerFactory
    {
        public ILogger CreateLogger(string categoryName) => new QuietLogger(host.CreateLogger(categoryName));

        public void AddProvider(ILoggerProvider provider) => host.AddProvider(provider);

        public void Dispose()
        {
            // the host's factory is the host's to dispose
        }

        private sealed class QuietLogger(ILogger inner) : ILogger
        {
            private static LogLevel Quieter(LogLevel level) => level switch
            {
                LogLevel.Warning or LogLevel.Information => LogLevel.Debug,
                LogLevel.Error => LogLevel.Warning,
                _ => level,
            };

            public IDisposable? BeginScope<TState>(TState state) where TState : notnull => inner.BeginScope(state);

            public bool IsEnabled(LogLevel logLevel) => inner.IsEnabled(Quieter(logLevel));

            public void Log<TState>(LogLevel logLevel, EventId eventId, TState state, Exception? exception, Func<TState, Exception?, string> formatter)
            {
                var level = Quieter(logLevel);
                if (inner.IsEnabled(level))
                {
                    inner.Log(level, eventId, state, exception, formatter);
                }
            }
        }
    }

    /// <summary>Signs each of Raft's outgoing messages (DotNext asks this factory for its client's handler).</summary>
    private sealed class SigningHandlers(RaftFailover failover) : IHttpMessageHandlerFactory
    {
        public HttpMessageHandler CreateHandler(string name)
            => new SigningHandler(failover)
            {
                InnerHandler = new SocketsHttpHandler
                {
                    ConnectTimeout = failover._options.ElectionTimeout / 2,
                    PooledConnectionIdleTimeout = TimeSpan.FromMinutes(1),
                },
            };
    }

    private sealed class SigningHandler(RaftFailover failover) : DelegatingHandler
    {
        protected override async Task<HttpResponseMessage> SendAsync(HttpRequestMessage request, CancellationToken cancellationToken)
        {
            byte[] body = [];
            if (request.Content is { } content)
            {
                body = await content.ReadAsByteArrayAsync(cancellationToken).ConfigureAwait(false);
                var buffered = new ByteArrayContent(body);
                foreach (var header in content.Headers)
                {
                    buffered.Headers.TryAddWithoutValidation(header.Key, header.Value);
                }

                request.Content = buffered;
                content.Dispose();
            }

            var service = failover._service.ServiceName;
            request.Headers.Remove(ProtocolHeaders.Caller);
            request.Headers.Remove(ProtocolHeaders.Callee);
            request.Headers.Remove(ProtocolHeaders.Signature);
            request.Headers.Add(ProtocolHeaders.Caller, service);
            request.Headers.Add(ProtocolHeaders.Callee, service);
            var message = new PeerMessage(request.Method.Method, request.RequestUri!.PathAndQuery, service, service, "", "", SignedRole, "",
                request.Content?.Headers.ContentType?.ToString() ?? "");
            request.Headers.Add(ProtocolHeaders.Signature, failover._node.Peers.Sign(message, body));
            return await base.SendAsync(request, cancellationToken).ConfigureAwait(false);
        }
    }

    public async ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
        {
            return;
        }

        await _stopping.CancelAsync().ConfigureAwait(false);
        await _coordinating.ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
        if (_raft.IsValueCreated)
        {
            await _raft.Value.DisposeAsync().ConfigureAwait(false);
        }

        _stopping.Dispose();
    }

    [LoggerMessage(1437, LogLevel.Information, "Replication: automatic failover by Raft; this member is {Member}, the voters are {Voters}")]
    private static partial void FailoverStarted(ILogger logger, string member, string voters);

    [LoggerMessage(1438, LogLevel.Information, "Replication: the Raft leader (the failover coordinator) is now {Leader}, Raft term {Term}")]
    private static partial void LeaderChanged(ILogger logger, string leader, long term);

    [LoggerMessage(1439, LogLevel.Warning, "Replication: no node answers as the primary; the coordinator promotes {Node} (log until {DurableUntil}) to term {Term}. Seen: {Seen}")]
    private static partial void Promoting(ILogger logger, string node, long term, long durableUntil, string seen);

    [LoggerMessage(1440, LogLevel.Warning, "Replication: the promotion of {Node} to term {Term} did not happen ({Why}); the coordinator asks again in {BackOffMs} ms at the earliest")]
    private static partial void PromotionRefused(ILogger logger, string node, long term, string why, long backOffMs);

    [LoggerMessage(1441, LogLevel.Warning, "Replication: no node answers as the primary and no replica holding a log answers either; nothing to promote. Seen: {Seen}")]
    private static partial void NoCandidate(ILogger logger, string seen);

    [LoggerMessage(1462, LogLevel.Warning, "Replication: this node leads Raft (term {Term}) and has held no valid leader lease for {Ms} ms (no heartbeat round completed with a majority): it coordinates without one (a promotion's own majority claim keeps it safe)")]
    private static partial void LeaderWithoutLease(ILogger logger, long ms, long term);

    [LoggerMessage(1444, LogLevel.Debug, "Replication: the failover coordinator's round ({Misses} without a primary before it): {Seen}")]
    private static partial void Round(ILogger logger, int misses, string seen);

    [LoggerMessage(1455, LogLevel.Information, "Replication: this node's Raft member is in standby (never elected) now: {Standby} (the primary stays out of the coordinator's role)")]
    private static partial void StandbyChanged(ILogger logger, bool standby);

    [LoggerMessage(1442, LogLevel.Error, "Replication: the failover coordinator's round failed; it goes on")]
    private static partial void CoordinatorFailed(ILogger logger, Exception exception);
}
