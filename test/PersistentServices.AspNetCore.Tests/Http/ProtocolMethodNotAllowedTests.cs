using System.Net;
using System.Text.Json;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Replication;

namespace PersistentServices.AspNetCore.Tests.Http;

/// <summary>
/// Issue 55: another method on one of the library's own endpoints that maps no catch-all of its own
/// (<c>GET /ps/replication/promote</c>) was routing's empty 405; it is a problem details body, with routing's Allow header.
/// The application's endpoints keep routing's answer.
/// </summary>
public sealed class ProtocolMethodNotAllowedTests : IDisposable
{
    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    [Theory]
    [InlineData("GET", ReplicationEndpoints.PromotePath)]
    [InlineData("GET", ReplicationEndpoints.AppendPath)]
    [InlineData("DELETE", ReplicationEndpoints.SwitchoverPath)]
    public async Task AnotherMethod_OnAProtocolEndpoint_Is405ProblemDetails_WithAllow(string method, string path)
    {
        await using var server = await TestServer.StartAsync(_dir.Path, o =>
        {
            o.ServiceName = "orders";
            o.Calls.PeerKey = "protocol-405-test-key-0123456789abcdef";
            o.Replication.Role = ReplicationRole.Replica;
            o.Replication.Replicas.Add(new Uri("http://127.0.0.1:1/"));
        });

        using var response = await server.Client.SendAsync(new HttpRequestMessage(new HttpMethod(method), path), Ct);

        var text = await response.Content.ReadAsStringAsync(Ct);
        Assert.True(response.StatusCode == HttpStatusCode.MethodNotAllowed, $"{(int)response.StatusCode}: {text}");
        Assert.Equal("application/problem+json", response.Content.Headers.ContentType?.MediaType);
        var problem = JsonDocument.Parse(text).RootElement;
        Assert.Equal("urn:persistentservices:problem:method-not-allowed", problem.GetProperty("type").GetString());
        Assert.Contains("POST", response.Content.Headers.Allow);
        Assert.Contains($"{method} is not accepted on {path}: it accepts POST", problem.GetProperty("detail").GetString(), StringComparison.Ordinal);
    }
}
