using System.Collections.Concurrent;
using System.Diagnostics;
using System.Net;
using System.Text.Json;

namespace PersistentServices.ProcessTests;

/// <summary>
/// The load the replication and failover tests run against a group (ReplicationTests, FailoverTests): each client its own
/// session, sending in turn a tally (session state) and a deposit into its own account (shared state); and the check that
/// every request ran exactly once, from the client side.
/// </summary>
internal static class ReplicationLoad
{
    /// <summary>Each client resends what it had not seen answered (the same number); then each session's tally and account hold exactly its requests.</summary>
    public static async Task AssertExactlyOnceAsync(ServiceProcess primary, string[] sessions, long[] acknowledged)
    {
        for (var i = 0; i < sessions.Length; i++)
        {
            var next = acknowledged[i] + 1;
            var (status, _, _) = await primary.SendUntilAnsweredAsync(Path(next), sessions[i], next, Body(i));
            Assert.Equal(HttpStatusCode.OK, status);
            acknowledged[i] = next;
        }

        var (_, balances, _) = await primary.SendAsync(HttpMethod.Get, "/balances", null, null);
        for (var i = 0; i < sessions.Length; i++)
        {
            var (status, tally, _) = await primary.SendAsync(HttpMethod.Get, "/tally", sessions[i], null);
            Assert.Equal(HttpStatusCode.OK, status);
            Assert.Equal((acknowledged[i] + 1) / 2, tally.GetProperty("count").GetInt64());
            Assert.Equal(acknowledged[i] / 2, balances.TryGetProperty($"c{i}", out var balance) ? balance.GetInt64() : 0);
        }
    }

    /// <summary>
    /// Clients that follow the primary of a group (FailoverTests): each sends its session's next request until it is
    /// answered, at the node that answered last, and on anything but 200 (a refused connection, a replica's 503, a reply
    /// pending on the replicas) resends the same request to the next node. <paramref name="nodes"/> is read at each send, so
    /// a test may replace a node's process.
    /// </summary>
    public sealed class FollowingClients : IAsyncDisposable
    {
        private readonly ServiceProcess[] _nodes;
        private readonly CancellationTokenSource _stop = new();
        private readonly Task[] _clients;
        private long _resends;

        private readonly TimeSpan? _requestTimeout;

        /// <param name="requestTimeout">How long a client waits for a node's answer before it sends the same request to the next node (none: until the node answers or fails).</param>
        public FollowingClients(ServiceProcess[] nodes, string[] sessions, TimeSpan? requestTimeout = null)
        {
            _nodes = nodes;
            _requestTimeout = requestTimeout;
            Acknowledged = new long[sessions.Length];
            _clients = [.. Enumerable.Range(0, sessions.Length).Select(i => Task.Run(() => RunAsync(i, sessions[i]), TestContext.Current.CancellationToken))];
        }

        /// <summary>Each client's last acknowledged request number.</summary>
        public long[] Acknowledged { get; }

        /// <summary>Every 200, in order: which node answered, and when (<see cref="Stopwatch.GetTimestamp"/>).</summary>
        public ConcurrentQueue<(int Node, long At)> Answers { get; } = new();

        /// <summary>Requests sent again (to the next node) because they were not answered 200.</summary>
        public long Resends => Interlocked.Read(ref _resends);

        /// <summary>The first answer after <paramref name="after"/> (by <paramref name="node"/>, if given), or null.</summary>
        public (int Node, long At)? FirstAnswerAfter(long after, int? node = null)
            => Answers.Where(a => a.At > after && (node is null || a.Node == node)).Select(a => ((int Node, long At)?)a).MinBy(a => a!.Value.At);

        public async Task StopAsync()
        {
            await _stop.CancelAsync();
            await Task.WhenAll(_clients);
        }

        public async ValueTask DisposeAsync()
        {
            await StopAsync();
            _stop.Dispose();
        }

        private async Task RunAsync(int i, string session)
        {
            var at = 0;
            var seq = 1L;
            while (!_stop.IsCancellationRequested)
            {
                var node = Volatile.Read(ref _nodes[at]);
                try
                {
                    // Given up after the timeout (the request goes on in the background; its answer is not looked at).
                    var (status, _, _) = await node.SendAsync(HttpMethod.Post, Path(seq), session, seq, Body(i))
                        .WaitAsync(_requestTimeout ?? Timeout.InfiniteTimeSpan, TestContext.Current.CancellationToken);
                    if (status == HttpStatusCode.OK)
                    {
                        Volatile.Write(ref Acknowledged[i], seq);
                        Answers.Enqueue((at, Stopwatch.GetTimestamp()));
                        seq++;
                        continue;
                    }
                }
                catch (Exception ex) when (ex is HttpRequestException or ObjectDisposedException or TaskCanceledException or TimeoutException)
                {
                    if (_stop.IsCancellationRequested)
                    {
                        return; // stopped (a test that failed elsewhere, too, must see its own failure)
                    }
                }

                Interlocked.Increment(ref _resends);
                at = (at + 1) % _nodes.Length;
                await Task.Delay(10, CancellationToken.None);
            }
        }
    }

    public static string Path(long seq) => seq % 2 == 1 ? "/tally" : "/deposit";

    public static object Body(int client) => new { account = $"c{client}", amount = 1 };

    /// <summary>Whether a node is a replica that holds the newest term's log (it rejoined: restarted, or demoted in its process); false when it does not answer.</summary>
    public static async Task<bool> IsCaughtUpReplicaAsync(ServiceProcess node)
    {
        try
        {
            var s = await StatusAsync(node);
            return s.GetProperty("role").GetString() == "Replica" && s.GetProperty("replica") is { ValueKind: JsonValueKind.Object } r &&
                   r.GetProperty("durableUntil").GetInt64() > 0 && r.GetProperty("contentTerm").GetInt64() == s.GetProperty("term").GetInt64();
        }
        catch (HttpRequestException)
        {
            return false;
        }
    }

    public static async Task<JsonElement> StatusAsync(ServiceProcess node)
    {
        using var response = await node.GetReplicationStatusAsync(TestContext.Current.CancellationToken);
        response.EnsureSuccessStatusCode();
        return JsonDocument.Parse(await response.Content.ReadAsStringAsync(TestContext.Current.CancellationToken)).RootElement.Clone();
    }
}
