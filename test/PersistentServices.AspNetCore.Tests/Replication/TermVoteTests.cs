using System.Net;
using System.Security.Cryptography;
using System.Text.Json;
using Microsoft.Extensions.DependencyInjection;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Replication;

namespace PersistentServices.AspNetCore.Tests.Replication;

/// <summary>
/// A node grants a term to one candidate only (docs/replication.md, "Two overlapping promotions"; Raft's votedFor). A group
/// of three: candidate A (simulated by this test: its claims are signed messages, the node itself is not running), candidate
/// B (a replica holding the log of primary P, which is stopped first) and the voter X. X takes term 2 from A's claim; B's
/// claim of term 2 is then denied at X, so B finds no majority and is not promoted (before the vote was recorded, X
/// counted for both: A and B each had two of three, two primaries of term 2). A's claim of term 2, sent again, is granted.
/// The same holds when X took term 2 from its primary's shipment: the term has a primary, no candidate is granted it.
/// </summary>
public sealed class TermVoteTests : IDisposable
{
    private const string PeerKey = "term-vote-test-peer-key-0123456789abcdef";

    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private Task<TestServer> StartAsync(string name, ReplicationRole role, int port, params int[] others)
        => ReplicationTestNode.StartAsync(Path.Combine(_dir.Path, name), PeerKey, role, port, others);

    /// <summary>A probe of <paramref name="term"/>: a promotion's claim when it names <paramref name="candidate"/>, else a primary's probe of where the node stands.</summary>
    private static HttpRequestMessage Probe(long term, Guid? candidate)
        => ReplicationEndpointsTests.Shipment(
            $"term={term};from=-1;begin=0;anchor=0;reset=0{(candidate is { } c ? $";candidate={c:N}" : "")};sha256={Convert.ToHexStringLower(SHA256.HashData([]))}",
            [], key: PeerKey);

    private static async Task<(HttpStatusCode Status, string Outcome, long Term)> SendAsync(TestServer node, HttpRequestMessage request)
    {
        using (request)
        {
            using var response = await node.Client.SendAsync(request, Ct);
            var text = await response.Content.ReadAsStringAsync(Ct);
            Assert.True(response.StatusCode is HttpStatusCode.OK or HttpStatusCode.Conflict, $"{(int)response.StatusCode}: {text}");
            var answer = JsonDocument.Parse(text).RootElement;
            return (response.StatusCode, answer.GetProperty("outcome").GetString()!, answer.GetProperty("term").GetInt64());
        }
    }

    /// <summary>
    /// Candidate B (holding primary P's log, P stopped) and voter X, of a group of three whose third node, candidate A, does
    /// not run; <paramref name="voteAtX"/> makes X take term 2 before B claims it.
    /// </summary>
    private async Task<(HttpStatusCode Status, string Detail, ReplicationNode B, ReplicationNode X)> CandidateBClaimsTerm2Async(TestServer b, TestServer x, int[] ports,
        Func<Task> voteAtX)
    {
        await using (var primary = await StartAsync("p", ReplicationRole.Primary, ports[0], ports[1]))
        {
            var session = await primary.StartSessionAsync();
            var (response, _) = await primary.SendAsync(HttpMethod.Post, "/counter/add", session, 1, new AddAmount("op1", 5));
            using (response)
            {
                Assert.Equal(HttpStatusCode.OK, response.StatusCode); // acknowledged: B holds it (RequiredReplicas 1 of 1)
            }
        }

        var candidate = b.App.Services.GetRequiredService<ReplicationNode>();
        var voter = x.App.Services.GetRequiredService<ReplicationNode>();
        Assert.False(candidate.Replica!.IsEmpty);
        await voteAtX();
        Assert.Equal(2, voter.Term);

        using var promote = ReplicationEndpointsTests.Shipment($"term=2;node={ReplicationEndpointsTests.ThisNode}", [], key: PeerKey, path: ReplicationEndpoints.PromotePath);
        using var promoted = await b.Client.SendAsync(promote, Ct);
        var text = await promoted.Content.ReadAsStringAsync(Ct);
        var detail = promoted.StatusCode == HttpStatusCode.Conflict ? JsonDocument.Parse(text).RootElement.GetProperty("detail").GetString()! : text;
        return (promoted.StatusCode, detail, candidate, voter);
    }

    [Fact]
    public async Task AVoterThatGrantedATermToCandidateA_DeniesCandidateBsClaimOfIt_AndGrantsAsAgain()
    {
        int[] ports = PersistentServices.TestSupport.LoopbackPorts.Free(4); // P, B, X, A (nobody listens at A's)
        await using var b = await StartAsync("b", ReplicationRole.Replica, ports[1], ports[2], ports[3]);
        await using var x = await StartAsync("x", ReplicationRole.Replica, ports[2], ports[1], ports[3]);
        var a = Guid.NewGuid();

        var (status, detail, candidate, voter) = await CandidateBClaimsTerm2Async(b, x, ports, async () =>
        {
            // Candidate A's claim of term 2 reaches X first: X takes the term and records its vote for A.
            Assert.Equal((HttpStatusCode.Conflict, "empty", 2L), await SendAsync(x, Probe(2, a)));
        });

        // B's claim of term 2 is denied at X: B has only its own vote of three, and is not promoted.
        Assert.True(status == HttpStatusCode.Conflict, $"{(int)status}: {detail}");
        Assert.Contains("only 1 of the group's 3 nodes took term 2", detail, StringComparison.Ordinal);
        Assert.Contains("term 2, Denied", detail, StringComparison.Ordinal); // X's answer, as the refusal names it
        Assert.Equal(ReplicationRole.Replica, candidate.Role);
        Assert.Equal(a, voter.Replica!.VotedFor);
        Assert.Equal(a, TermFile.Read(Path.Combine(_dir.Path, "x"))!.Value.VotedFor);

        // A's claim of term 2, sent again, is granted again; any other candidate's is denied.
        Assert.Equal((HttpStatusCode.Conflict, "empty", 2L), await SendAsync(x, Probe(2, a)));
        Assert.Equal((HttpStatusCode.Conflict, "denied", 2L), await SendAsync(x, Probe(2, Guid.NewGuid())));

        // B voted for itself in term 2 (its own claim): A's claim of term 2 is denied there too.
        Assert.NotEqual(Guid.Empty, candidate.Replica!.VotedFor);
        Assert.Equal((HttpStatusCode.Conflict, "denied", 2L), await SendAsync(b, Probe(2, a)));
    }

    [Fact]
    public async Task AVoterThatTookATermFromItsPrimary_DeniesACandidatesClaimOfIt()
    {
        int[] ports = PersistentServices.TestSupport.LoopbackPorts.Free(4);
        await using var b = await StartAsync("b", ReplicationRole.Replica, ports[1], ports[2], ports[3]);
        await using var x = await StartAsync("x", ReplicationRole.Replica, ports[2], ports[1], ports[3]);

        var (status, detail, candidate, voter) = await CandidateBClaimsTerm2Async(b, x, ports, async () =>
        {
            // The primary of term 2 (A, promoted) probes X for where it stands: no claim, so X takes term 2 with no vote.
            Assert.Equal((HttpStatusCode.Conflict, "empty", 2L), await SendAsync(x, Probe(2, candidate: null)));
        });

        Assert.True(status == HttpStatusCode.Conflict, $"{(int)status}: {detail}");
        Assert.Contains("only 1 of the group's 3 nodes took term 2", detail, StringComparison.Ordinal);
        Assert.Equal(ReplicationRole.Replica, candidate.Role);
        Assert.Equal(Guid.Empty, voter.Replica!.VotedFor);

        // The primary's own probes go on being answered.
        Assert.Equal((HttpStatusCode.Conflict, "empty", 2L), await SendAsync(x, Probe(2, candidate: null)));
    }
}
