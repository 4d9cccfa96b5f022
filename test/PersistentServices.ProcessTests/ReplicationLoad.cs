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

    public static string Path(long seq) => seq % 2 == 1 ? "/tally" : "/deposit";

    public static object Body(int client) => new { account = $"c{client}", amount = 1 };

    public static async Task<JsonElement> StatusAsync(ServiceProcess node)
    {
        using var response = await node.Client.GetAsync("/ps/replication/status", TestContext.Current.CancellationToken);
        response.EnsureSuccessStatusCode();
        return JsonDocument.Parse(await response.Content.ReadAsStringAsync(TestContext.Current.CancellationToken)).RootElement.Clone();
    }
}
