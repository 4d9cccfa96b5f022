using System.Net;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Routing;
using Microsoft.Extensions.DependencyInjection;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Http;
using PersistentServices.Hosting;

namespace PersistentServices.AspNetCore.Tests.Builder;

/// <summary>
/// Endpoints marked by convention (<c>.Persistent()</c>, <c>.PersistentReadOnly()</c>) against a real Kestrel server:
/// they behave as the attributed ones (RecoveryTests, PersistenceMiddlewareTests).
/// </summary>
public sealed class PersistentEndpointConventionBuilderExtensionsTests : IDisposable
{
    private readonly TempDirectory _dir = new();
    private readonly TestBehavior _behavior = new();

    public void Dispose() => _dir.Dispose();

    [Theory]
    [InlineData("/convention/add", "convention:")]
    [InlineData("/convention-group/add", "convention-group:")]
    public async Task Persistent_DuplicateRequest_RunsOnce_AndRestartReplaysIt(string path, string counter)
    {
        string session;
        string secondReply;
        await using (var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior))
        {
            session = await server.StartSessionAsync();
            var (first, _) = await server.SendAsync(HttpMethod.Post, path, session, 1, new { opId = "a", amount = 5 });
            var (second, secondBody) = await server.SendAsync(HttpMethod.Post, path, session, 2, new { opId = "b", amount = 7 });
            var (duplicate, duplicateBody) = await server.SendAsync(HttpMethod.Post, path, session, 2, new { opId = "b", amount = 7 });
            secondReply = secondBody.GetRawText();

            Assert.Equal(HttpStatusCode.OK, first.StatusCode);
            Assert.Equal("persistent", second.Headers.GetValues("PS-Role").Single());
            Assert.Equal("true", duplicate.Headers.GetValues("PS-Replayed").Single());
            Assert.Equal(secondReply, duplicateBody.GetRawText());
            Assert.Equal(1, _behavior.Count(counter + "b"));
            await server.CrashAsync();
        }

        _behavior.Reset();
        await using (var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior))
        {
            await server.RecoveryCompletion;
            Assert.Equal(RecoveryStage.Ready, server.Availability.Stage);

            // The session's state came back from the log (replayed, or read from a checkpoint)...
            var executions = _behavior.Count(counter + "b");
            var (read, readBody) = await server.SendAsync(HttpMethod.Get, "/convention", session, null);
            Assert.Equal(12, readBody.GetProperty("total").GetInt64());
            Assert.Equal("read-only", read.Headers.GetValues("PS-Role").Single());

            // ... and a retry after the restart is answered from the log, running nothing.
            var (duplicate, duplicateBody) = await server.SendAsync(HttpMethod.Post, path, session, 2, new { opId = "b", amount = 7 });
            Assert.Equal("true", duplicate.Headers.GetValues("PS-Replayed").Single());
            Assert.Equal(secondReply, duplicateBody.GetRawText());
            Assert.Equal(executions, _behavior.Count(counter + "b"));

            var (next, nextBody) = await server.SendAsync(HttpMethod.Post, path, session, 3, new { opId = "c", amount = 1 });
            Assert.Equal(HttpStatusCode.OK, next.StatusCode);
            Assert.Equal(13, nextBody.GetProperty("total").GetInt64());
        }
    }

    [Fact]
    public async Task PersistentReadOnly_ChangesNoSessionState_AsTheAttributeDoes()
    {
        await using var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior);
        var session = await server.StartSessionAsync();
        await server.SendAsync(HttpMethod.Post, "/convention/add", session, 1, new { opId = "a", amount = 5 });

        var (byConvention, conventionBody) = await server.SendAsync(HttpMethod.Get, "/convention", session, null);
        var (byAttribute, attributeBody) = await server.SendAsync(HttpMethod.Get, "/counter", session, null);

        Assert.Equal(HttpStatusCode.OK, byConvention.StatusCode);
        Assert.Equal(attributeBody.GetRawText(), conventionBody.GetRawText());
        Assert.Equal(byAttribute.Headers.GetValues("PS-Role").Single(), byConvention.Headers.GetValues("PS-Role").Single());
        Assert.False(byConvention.Headers.Contains("PS-Seq"));
    }

    [Fact]
    public async Task Conventions_AddTheAttributesAsMetadata_SoTheRolesAreTheSame()
    {
        await using var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior);
        var endpoints = server.App.Services.GetRequiredService<EndpointDataSource>().Endpoints;

        static Endpoint Find(IReadOnlyList<Endpoint> endpoints, string pattern, string method) => endpoints.OfType<RouteEndpoint>().Single(e =>
            e.RoutePattern.RawText == pattern && e.Metadata.GetMetadata<IHttpMethodMetadata>()?.HttpMethods.Contains(method) == true);

        var persistent = Find(endpoints, "/convention/add", "POST");
        var grouped = Find(endpoints, "/convention-group/add", "POST");
        var readOnly = Find(endpoints, "/convention", "GET");
        Assert.NotNull(persistent.Metadata.GetMetadata<PersistentAttribute>());
        Assert.NotNull(grouped.Metadata.GetMetadata<PersistentAttribute>());
        Assert.NotNull(readOnly.Metadata.GetMetadata<PersistentReadOnlyAttribute>());
        Assert.Equal(EndpointRole.Persistent, EndpointRoles.Of(persistent));
        Assert.Equal(EndpointRole.Persistent, EndpointRoles.Of(grouped));
        Assert.Equal(EndpointRole.ReadOnly, EndpointRoles.Of(readOnly));
        Assert.Equal(EndpointRoles.Of(Find(endpoints, "/counter/add", "POST")), EndpointRoles.Of(persistent));
        Assert.Equal(EndpointRoles.Of(Find(endpoints, "/counter", "GET")), EndpointRoles.Of(readOnly));
    }

    [Fact]
    public void Functional_AndRequireIdempotencyKey_AddTheirAttributes()
    {
        var builder = new TestConventionBuilder();
        builder.Functional().RequireIdempotencyKey();
        var endpoint = builder.Build();

        Assert.NotNull(endpoint.Metadata.GetMetadata<FunctionalAttribute>());
        Assert.NotNull(endpoint.Metadata.GetMetadata<RequireIdempotencyKeyAttribute>());
        Assert.Equal(EndpointRole.Functional, EndpointRoles.Of(endpoint));
    }

    [Fact]
    public void ObsoleteReadOnlyAttribute_IsStillReadOnly()
    {
#pragma warning disable CS0618 // the old name must keep its meaning
        var endpoint = new Endpoint(_ => Task.CompletedTask, new EndpointMetadataCollection(new PersistentAttribute(), new ReadOnlyAttribute()), "old name");
#pragma warning restore CS0618

        Assert.Equal(EndpointRole.ReadOnly, EndpointRoles.Of(endpoint));
    }

    [Fact]
    public void Convention_AfterTheAttribute_Wins_AsTheMoreSpecificMetadata()
    {
        var builder = new TestConventionBuilder(new PersistentAttribute());
        builder.PersistentReadOnly();

        Assert.Equal(EndpointRole.ReadOnly, EndpointRoles.Of(builder.Build()));
    }

    /// <summary>A convention builder over one endpoint, as routing applies conventions: in order, on the endpoint's builder.</summary>
    private sealed class TestConventionBuilder(params object[] metadata) : IEndpointConventionBuilder
    {
        private readonly List<Action<EndpointBuilder>> _conventions = [];

        public void Add(Action<EndpointBuilder> convention) => _conventions.Add(convention);

        public Endpoint Build()
        {
            var builder = new RouteEndpointBuilder(_ => Task.CompletedTask, Microsoft.AspNetCore.Routing.Patterns.RoutePatternFactory.Parse("/x"), 0);
            foreach (var item in metadata)
            {
                builder.Metadata.Add(item);
            }

            foreach (var convention in _conventions)
            {
                convention(builder);
            }

            return builder.Build();
        }
    }
}
