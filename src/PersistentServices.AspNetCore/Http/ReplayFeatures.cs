using System.Collections;
using System.Runtime.CompilerServices;
using Microsoft.AspNetCore.Http.Features;
using Microsoft.AspNetCore.Http.Features.Authentication;
using Microsoft.AspNetCore.Routing;

namespace PersistentServices.Http;

/// <summary>
/// The feature collection of a replayed request (<see cref="LoggedRequests.CreateReplayContext"/>): the features a request
/// reads on its way through routing, binding and the endpoint have their own fields, as in Kestrel's collection, and
/// the rest go to a dictionary. <see cref="FeatureCollection"/> keeps every feature in a dictionary, and every replayed
/// request starts with a fresh context whose features are fetched afresh: those lookups were 5 % of replay's time
/// (docs/benchmarks.md "Replay rate: where a short replay's time goes"). Same semantics as <see cref="FeatureCollection"/>:
/// setting null removes, every set moves <see cref="Revision"/>.
/// </summary>
internal sealed class ReplayFeatures : IFeatureCollection
{
    private object? _request;
    private object? _bodyDetection;
    private object? _requestBodyPipe;
    private object? _response;
    private object? _responseBody;
    private object? _lifetime;
    private object? _connection;
    private object? _services;
    private object? _endpoint;
    private object? _routeValues;
    private object? _items;
    private object? _query;
    private object? _form;
    private object? _cookies;
    private object? _authentication;
    private Dictionary<Type, object>? _others;
    private int _revision;

    public bool IsReadOnly => false;

    public int Revision => _revision;

    public object? this[Type key]
    {
        get
        {
            ArgumentNullException.ThrowIfNull(key);
            ref var slot = ref Slot(key);
            return !Unsafe.IsNullRef(ref slot) ? slot : _others?.GetValueOrDefault(key);
        }
        set
        {
            ArgumentNullException.ThrowIfNull(key);
            ref var slot = ref Slot(key);
            if (!Unsafe.IsNullRef(ref slot))
            {
                slot = value;
            }
            else if (value is null)
            {
                _others?.Remove(key);
            }
            else
            {
                (_others ??= [])[key] = value;
            }

            _revision++;
        }
    }

    public TFeature? Get<TFeature>() => (TFeature?)this[typeof(TFeature)];

    public void Set<TFeature>(TFeature? instance) => this[typeof(TFeature)] = instance;

    public IEnumerator<KeyValuePair<Type, object>> GetEnumerator()
    {
        foreach (var (type, value) in Known())
        {
            if (value is not null)
            {
                yield return new KeyValuePair<Type, object>(type, value);
            }
        }

        if (_others is not null)
        {
            foreach (var pair in _others)
            {
                yield return pair;
            }
        }
    }

    IEnumerator IEnumerable.GetEnumerator() => GetEnumerator();

    private (Type, object?)[] Known() =>
    [
        (typeof(IHttpRequestFeature), _request),
        (typeof(IHttpRequestBodyDetectionFeature), _bodyDetection),
        (typeof(IRequestBodyPipeFeature), _requestBodyPipe),
        (typeof(IHttpResponseFeature), _response),
        (typeof(IHttpResponseBodyFeature), _responseBody),
        (typeof(IHttpRequestLifetimeFeature), _lifetime),
        (typeof(IHttpConnectionFeature), _connection),
        (typeof(IServiceProvidersFeature), _services),
        (typeof(IEndpointFeature), _endpoint),
        (typeof(IRouteValuesFeature), _routeValues),
        (typeof(IItemsFeature), _items),
        (typeof(IQueryFeature), _query),
        (typeof(IFormFeature), _form),
        (typeof(IRequestCookiesFeature), _cookies),
        (typeof(IHttpAuthenticationFeature), _authentication),
    ];

    private ref object? Slot(Type key)
    {
        if (key == typeof(IHttpRequestFeature)) return ref _request;
        if (key == typeof(IEndpointFeature)) return ref _endpoint;
        if (key == typeof(IHttpResponseFeature)) return ref _response;
        if (key == typeof(IHttpResponseBodyFeature)) return ref _responseBody;
        if (key == typeof(IServiceProvidersFeature)) return ref _services;
        if (key == typeof(IRouteValuesFeature)) return ref _routeValues;
        if (key == typeof(IRequestBodyPipeFeature)) return ref _requestBodyPipe;
        if (key == typeof(IHttpRequestBodyDetectionFeature)) return ref _bodyDetection;
        if (key == typeof(IHttpRequestLifetimeFeature)) return ref _lifetime;
        if (key == typeof(IItemsFeature)) return ref _items;
        if (key == typeof(IQueryFeature)) return ref _query;
        if (key == typeof(IFormFeature)) return ref _form;
        if (key == typeof(IRequestCookiesFeature)) return ref _cookies;
        if (key == typeof(IHttpAuthenticationFeature)) return ref _authentication;
        if (key == typeof(IHttpConnectionFeature)) return ref _connection;
        return ref Unsafe.NullRef<object?>();
    }
}
