using System.Net;
using System.Text;
using System.Text.Json;
using Google.Protobuf;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Calls;
using PersistentServices.Domain;
using PersistentServices.Log.Records;

namespace PersistentServices.AspNetCore.Tests.Domain;

/// <summary>
/// The domain's control endpoints answer a member's malformed message, a flush of a state this service never had and a
/// wrong method like the rest of the protocol (issue 32, finding 8): problem details, 400 or 405, never a 500, an empty
/// 405 or a 200, and nothing of a refused message is learned.
/// </summary>
public sealed class DomainEndpointsTests : IDisposable
{
    private const string PeerKey = "domain-endpoints-test-key-0123456789abcdef";

    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    [Theory]
    [InlineData("[null]", "a null entry at index 0")]
    [InlineData("""[{"Service":"B","Epoch":1,"Lsn":64},null]""", "a null entry at index 1")]
    [InlineData("""[{"service":"B","epoch":1,"lsn":64}]""", "not a JSON array")]
    [InlineData("""[{"Service":"B","Epoch":1}]""", "not a JSON array")]
    [InlineData("""[{"Service":null,"Epoch":1,"Lsn":64}]""", "not a JSON array")]
    [InlineData("""[{"Service":"B","Epoch":1,"Lsn":64,"Extra":1}]""", "not a JSON array")]
    [InlineData("""[{"Service":"B","Epoch":"1","Lsn":64}]""", "not a JSON array")]
    [InlineData("""[{"Service":"B","Epoch":-1,"Lsn":64}]""", "epoch -1")]
    [InlineData("""[{"Service":"B","Epoch":0,"Lsn":64}]""", "epoch 0")]
    [InlineData("""[{"Service":"B","Epoch":1,"Lsn":-64}]""", "a negative LSN")]
    [InlineData("""{"Service":"B","Epoch":1,"Lsn":64}""", "not a JSON array")]
    [InlineData("null", "a null body")]
    public async Task TellRecovered_SignedButMalformed_Is400ProblemDetails_AndNothingIsLearned(string body, string reason)
    {
        await using var server = await StartMemberAAsync();

        using var response = await SendSignedAsync(server, HttpMethod.Post, ServiceDomain.RecoveredPath, body);

        var problem = await ProblemAsync(response, HttpStatusCode.BadRequest, "domain-recovered");
        Assert.Contains(reason, problem.GetProperty("detail").GetString(), StringComparison.Ordinal);
        Assert.DoesNotContain(server.Runtime.Domain.Recovered.All, n => n.Service == "B");
    }

    [Fact]
    public async Task TellRecovered_WellFormed_IsLearned()
    {
        await using var server = await StartMemberAAsync();

        using var response = await SendSignedAsync(server, HttpMethod.Post, ServiceDomain.RecoveredPath,
            """[{"Service":"B","Epoch":3,"Lsn":4096}]""");

        Assert.Equal(HttpStatusCode.NoContent, response.StatusCode);
        Assert.Equal(4096, server.Runtime.Domain.Recovered.RecoveredLsn("B", 3));
    }

    [Fact]
    public async Task TellRecovered_NamingAServiceOutsideTheDomain_Is400ProblemDetails_AndNothingIsLearned()
    {
        // Issue 55: a member name that is not in the domain was answered 204 (and left out silently).
        await using var server = await StartMemberAAsync();

        using var response = await SendSignedAsync(server, HttpMethod.Post, ServiceDomain.RecoveredPath,
            """[{"Service":"B","Epoch":3,"Lsn":4096},{"Service":"Z","Epoch":1,"Lsn":64}]""");

        var problem = await ProblemAsync(response, HttpStatusCode.BadRequest, "domain-recovered");
        Assert.Contains("'Z', which is not a member", problem.GetProperty("detail").GetString(), StringComparison.Ordinal);
        Assert.DoesNotContain(server.Runtime.Domain.Recovered.All, n => n.Service is "Z" or "B");
    }

    [Fact]
    public async Task Flush_PastTheLogsTailOfTheRunningEpoch_Is400_NotADurableAnswer()
    {
        await using var server = await StartMemberAAsync();
        var runtime = server.Runtime;
        var lsn = runtime.Log.Append(RecordKind.Payload, new Payload { Data = ByteString.CopyFromUtf8("a state of A") });

        using var inside = await SendSignedAsync(server, HttpMethod.Post, ServiceDomain.FlushPath, $"{runtime.Epoch}.{lsn}");
        Assert.Equal(HttpStatusCode.OK, inside.StatusCode);
        Assert.True(runtime.Log.DurableUntil > lsn);

        foreach (var past in new[] { runtime.Log.TailAddress, runtime.Log.TailAddress + (1 << 20), long.MaxValue })
        {
            using var response = await SendSignedAsync(server, HttpMethod.Post, ServiceDomain.FlushPath, $"{runtime.Epoch}.{past}");
            var problem = await ProblemAsync(response, HttpStatusCode.BadRequest, "domain-flush");
            Assert.Contains("past the log's tail", problem.GetProperty("detail").GetString(), StringComparison.Ordinal);
        }
    }

    [Theory]
    [InlineData("-1.64")]
    [InlineData("1.-64")]
    [InlineData("+1.64")]
    [InlineData("1.+64")]
    [InlineData(" 1.64")]
    [InlineData("0.64")]
    [InlineData("1.99999999999999999999")]
    [InlineData("1")]
    [InlineData("")]
    [InlineData("99.64")]
    public async Task Flush_MalformedNegativeOrLaterEpoch_Is400ProblemDetails(string body)
    {
        await using var server = await StartMemberAAsync();

        using var response = await SendSignedAsync(server, HttpMethod.Post, ServiceDomain.FlushPath, body);

        await ProblemAsync(response, HttpStatusCode.BadRequest, "domain-flush");
    }

    [Theory]
    [InlineData("GET", ServiceDomain.FlushPath, "POST")]
    [InlineData("PUT", ServiceDomain.FlushPath, "POST")]
    [InlineData("DELETE", ServiceDomain.RecoveredPath, "GET, POST")]
    [InlineData("PATCH", ServiceDomain.RecoveredPath, "GET, POST")]
    public async Task WrongMethod_Is405ProblemDetails_WithAllow(string method, string path, string allow)
    {
        await using var server = await StartMemberAAsync();

        using var response = await server.Client.SendAsync(new HttpRequestMessage(new HttpMethod(method), path), TestContext.Current.CancellationToken);

        await ProblemAsync(response, HttpStatusCode.MethodNotAllowed, "method-not-allowed");
        Assert.Equal(allow, string.Join(", ", response.Content.Headers.Allow));
    }

    /// <summary>
    /// A member answering the pull of recovered state numbers with what this version cannot read: the pull gives up on that
    /// answer (the hosted service asks again later) instead of throwing an unhandled exception (a null service name made
    /// the member list's lookup throw), and learns nothing of it.
    /// </summary>
    [Theory]
    [InlineData("""[{"service":"B","epoch":1,"lsn":64}]""")]
    [InlineData("[null]")]
    [InlineData("""[{"Service":"B","Epoch":1,"Lsn":-1}]""")]
    public async Task PullRecovered_MemberAnswersMalformed_NullNotAnException(string answer)
    {
        var memberBuilder = WebApplication.CreateBuilder();
        memberBuilder.WebHost.UseUrls("http://127.0.0.1:0");
        memberBuilder.Logging.ClearProviders();
        await using var member = memberBuilder.Build();
        member.MapGet(ServiceDomain.RecoveredPath, () => Results.Text(answer, "application/json"));
        member.MapPost(ServiceDomain.RecoveredPath, () => Results.NoContent());
        await member.StartAsync(TestContext.Current.CancellationToken);
        await using var server = await StartMemberAAsync(new Uri(member.Urls.First()));

        Assert.Null(await server.Runtime.Domain.PullRecoveredAsync("B", TestContext.Current.CancellationToken));
    }

    private async Task<TestServer> StartMemberAAsync(Uri? memberB = null)
    {
        var server = await TestServer.StartAsync(_dir.Path, o =>
        {
            o.ServiceName = "A";
            o.Calls.PeerKey = PeerKey;
            o.Domain.Members["A"] = new Uri("http://127.0.0.1:1/");
            o.Domain.Members["B"] = memberB ?? new Uri("http://127.0.0.1:1/");
        });
        await server.RecoveryCompletion;
        return server;
    }

    /// <summary>A domain message from member B to A, signed with the peer key as members sign them.</summary>
    private static Task<HttpResponseMessage> SendSignedAsync(TestServer server, HttpMethod method, string path, string body)
    {
        var bytes = Encoding.UTF8.GetBytes(body);
        var request = new HttpRequestMessage(method, path) { Content = new ByteArrayContent(bytes) };
        request.Headers.TryAddWithoutValidation("PS-Caller", "B");
        request.Headers.TryAddWithoutValidation("PS-Callee", "A");
        request.Headers.TryAddWithoutValidation("PS-Signature", PeerSignature.Sign(Encoding.UTF8.GetBytes(PeerKey), DateTimeOffset.UtcNow.ToUnixTimeMilliseconds(),
            PeerSignature.V2, new PeerMessage(method.Method, path, "B", "A", "", "", "domain", "", ""), bytes));
        return server.Client.SendAsync(request, TestContext.Current.CancellationToken);
    }

    private static async Task<JsonElement> ProblemAsync(HttpResponseMessage response, HttpStatusCode status, string type)
    {
        var text = await response.Content.ReadAsStringAsync(TestContext.Current.CancellationToken);
        Assert.True(response.StatusCode == status, $"expected {(int)status}, got {(int)response.StatusCode}: {text}");
        Assert.Equal("application/problem+json", response.Content.Headers.ContentType?.MediaType);
        var problem = JsonDocument.Parse(text).RootElement.Clone();
        Assert.Equal("urn:persistentservices:problem:" + type, problem.GetProperty("type").GetString());
        Assert.Equal((int)status, problem.GetProperty("status").GetInt32());
        return problem;
    }
}
