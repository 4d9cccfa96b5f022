using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Http.Features;
using PersistentServices.Http;

namespace PersistentServices.AspNetCore.Tests.Http;

/// <summary>The replayed request's feature collection behaves as ASP.NET Core's <see cref="FeatureCollection"/>.</summary>
public sealed class ReplayFeaturesTests
{
    private interface ICustomFeature;

    private sealed class Custom : ICustomFeature;

    [Fact]
    public void SetGetRemove_KnownAndOtherFeatures_AsFeatureCollection()
    {
        IFeatureCollection ours = new ReplayFeatures();
        IFeatureCollection theirs = new FeatureCollection();
        var request = new HttpRequestFeature();
        var endpoint = new Endpoint(null, null, "e");
        var custom = new Custom();

        foreach (var features in new[] { ours, theirs })
        {
            var revision = features.Revision;
            features.Set<IHttpRequestFeature>(request);
            features.Set<ICustomFeature>(custom);
            features[typeof(IEndpointFeature)] = new EndpointFeature(endpoint);
            Assert.Equal(revision + 3, features.Revision);
            Assert.Same(request, features.Get<IHttpRequestFeature>());
            Assert.Same(custom, features[typeof(ICustomFeature)]);
            Assert.Same(endpoint, features.Get<IEndpointFeature>()!.Endpoint);
            Assert.Null(features.Get<IFormFeature>());
            Assert.Null(features.Get<IHttpResponseTrailersFeature>());
            Assert.Equal(3, features.Count());

            features.Set<ICustomFeature>(null);
            features.Set<IHttpRequestFeature>(null);
            Assert.Null(features.Get<ICustomFeature>());
            Assert.Null(features.Get<IHttpRequestFeature>());
            Assert.Equal([typeof(IEndpointFeature)], features.Select(f => f.Key));
            Assert.False(features.IsReadOnly);
            Assert.Throws<ArgumentNullException>(() => features[null!]);
        }
    }

    [Fact]
    public void ADefaultHttpContext_OverIt_ReadsTheRequestAndKeepsWhatTheEndpointSets()
    {
        var features = new ReplayFeatures();
        features.Set<IHttpRequestFeature>(new HttpRequestFeature { Method = "POST", Path = "/a", QueryString = "?x=1" });
        features.Set<IHttpResponseFeature>(new HttpResponseFeature());
        var context = new DefaultHttpContext(features);

        context.Items["k"] = "v";
        context.SetEndpoint(new Endpoint(null, null, "e"));
        context.Response.StatusCode = 201;

        Assert.Equal("POST", context.Request.Method);
        Assert.Equal("1", context.Request.Query["x"]);
        Assert.Equal("v", context.Items["k"]);
        Assert.Equal("e", context.GetEndpoint()!.DisplayName);
        Assert.Equal(201, context.Response.StatusCode);
    }

    private sealed class EndpointFeature(Endpoint endpoint) : IEndpointFeature
    {
        public Endpoint? Endpoint { get; set; } = endpoint;
    }
}
